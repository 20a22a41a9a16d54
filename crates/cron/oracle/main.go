// Command oracle prints what robfig/cron v3 ParseStandard and Schedule.Next return for each
// case read from stdin, one case per line:
//
//	<expression>\t<zone of the start time>\t<start, RFC 3339>\t<count>
//
// and writes, per case, the same four columns followed by either "ERR\t<error text>" or
// "OK\t<time> <time> ..." (RFC 3339 with offset, in the start zone; "ZERO" for the zero time).
// Expressions are written with Go's strconv.Quote so that any byte survives the round trip.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	cron "github.com/robfig/cron"
)

func parse(expr string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("PANIC %v", r)
		}
	}()
	return cron.ParseStandard(expr)
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "\t")
		if len(parts) != 4 {
			fmt.Fprintf(os.Stderr, "bad case line: %q\n", line)
			os.Exit(2)
		}
		expr, err := strconv.Unquote(parts[0])
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad quoted expression: %q\n", parts[0])
			os.Exit(2)
		}
		loc, err := time.LoadLocation(parts[1])
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad zone: %v\n", err)
			os.Exit(2)
		}
		t, err := time.Parse(time.RFC3339Nano, parts[2])
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad start: %v\n", err)
			os.Exit(2)
		}
		n, err := strconv.Atoi(parts[3])
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad count: %v\n", err)
			os.Exit(2)
		}
		t = t.In(loc)
		prefix := strings.Join(parts, "\t")
		s, err := parse(expr)
		if err != nil {
			fmt.Fprintf(w, "%s\tERR\t%s\n", prefix, strconv.Quote(err.Error()))
			continue
		}
		// Each time is flushed as soon as it is known, so that a caller that has to give up
		// on a Next that never returns still sees the times before it.
		fmt.Fprintf(w, "%s\tOK\t", prefix)
		for i := 0; i < n; i++ {
			if i > 0 {
				w.WriteString(" ")
			}
			t = s.Next(t)
			if t.IsZero() {
				w.WriteString("ZERO")
				break
			}
			w.WriteString(t.Format(time.RFC3339))
			w.Flush()
		}
		w.WriteString("\n")
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
