#!/usr/bin/env python3
"""Generate crates/apiserver/src/protobuf/schema.rs from a kubectl binary.

Usage: scripts/gen-protobuf-schema.py KUBECTL > crates/apiserver/src/protobuf/schema.rs

kubectl (amd64 Linux, Go >= 1.21 runtime layout) carries Go's reflection data for every API
type it can encode: each struct field's Go type (pointer or value, slice, map, struct) and its
tags, `json:"name,omitempty"` and `protobuf:"varint,1,opt,name=parallelism"`. Those are exactly
what a protobuf request body needs to become the JSON the same client would have sent: the
field numbers and wire types from the protobuf tag, the JSON name and `omitempty` from the
json tag, and whether a present zero value survives (a pointer, or no `omitempty`).

The script reads the binary's ELF sections, walks the type links, and emits one static table
per Go struct reachable from the served kinds (ROOTS), in Go field order.
"""

import struct
import sys

# (Go package path, type name, apiVersion, kind) of each object a request body may carry.
# An apiVersion of "*" accepts any (DeleteOptions is registered in every group version).
ROOTS = [
    ("k8s.io/api/batch/v1", "Job", "batch/v1", "Job"),
    ("k8s.io/api/batch/v1", "CronJob", "batch/v1", "CronJob"),
    ("k8s.io/api/core/v1", "Namespace", "v1", "Namespace"),
    ("k8s.io/api/core/v1", "Pod", "v1", "Pod"),
    ("k8s.io/api/core/v1", "Node", "v1", "Node"),
    ("k8s.io/api/core/v1", "Event", "v1", "Event"),
    ("k8s.io/api/core/v1", "Binding", "v1", "Binding"),
    ("k8s.io/api/events/v1", "Event", "events.k8s.io/v1", "Event"),
    ("k8s.io/api/coordination/v1", "Lease", "coordination.k8s.io/v1", "Lease"),
    ("k8s.io/api/core/v1", "ConfigMap", "v1", "ConfigMap"),
    ("k8s.io/api/core/v1", "Secret", "v1", "Secret"),
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "DeleteOptions", "*", "DeleteOptions"),
    ("k8s.io/api/authorization/v1", "SelfSubjectAccessReview", "authorization.k8s.io/v1", "SelfSubjectAccessReview"),
    ("k8s.io/api/authorization/v1", "SelfSubjectRulesReview", "authorization.k8s.io/v1", "SelfSubjectRulesReview"),
    ("k8s.io/api/authorization/v1", "SubjectAccessReview", "authorization.k8s.io/v1", "SubjectAccessReview"),
    ("k8s.io/api/authorization/v1", "LocalSubjectAccessReview", "authorization.k8s.io/v1", "LocalSubjectAccessReview"),
    ("k8s.io/api/authentication/v1", "SelfSubjectReview", "authentication.k8s.io/v1", "SelfSubjectReview"),
    ("k8s.io/api/authentication/v1", "TokenReview", "authentication.k8s.io/v1", "TokenReview"),
    ("k8s.io/api/core/v1", "ServiceAccount", "v1", "ServiceAccount"),
    ("k8s.io/api/scheduling/v1", "PriorityClass", "scheduling.k8s.io/v1", "PriorityClass"),
    ("k8s.io/api/policy/v1", "Eviction", "policy/v1", "Eviction"),
    ("k8s.io/api/policy/v1", "PodDisruptionBudget", "policy/v1", "PodDisruptionBudget"),
]

META = "k8s.io/apimachinery/pkg/apis/meta/v1"
# Go types with their own JSON form (custom MarshalJSON), decoded by hand-written code.
SPECIAL = {
    (META, "Time"): "Time",
    (META, "MicroTime"): "MicroTime",
    (META, "FieldsV1"): "FieldsV1",
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "Quantity",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): "IntOrString",
}
# Go types with a custom JSON form that no served type uses yet: meeting one must not be
# mistaken for a plain message, so the generator stops and asks for a decoder.
UNSUPPORTED = {
    (META, "Duration"),
    ("k8s.io/apimachinery/pkg/runtime", "RawExtension"),
    ("k8s.io/apimachinery/pkg/runtime", "Unknown"),
}

K_BOOL, K_INT32, K_INT64, K_UINT8 = 1, 5, 6, 8
K_MAP, K_PTR, K_SLICE, K_STRING, K_STRUCT = 21, 22, 23, 24, 25
SCALARS = {K_BOOL: "Bool", K_INT32: "Int32", K_INT64: "Int64", K_STRING: "String"}
TFLAG_UNCOMMON, TFLAG_EXTRA_STAR = 1, 2


class Binary:
    def __init__(self, path):
        self.data = open(path, "rb").read()
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            sys.exit("not a 64-bit little-endian ELF file")
        shoff = struct.unpack_from("<Q", d, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        stroff = struct.unpack_from("<Q", d, shoff + shstrndx * shentsize + 24)[0]
        self.sections = {}
        for i in range(shnum):
            o = shoff + i * shentsize
            name, _, _, addr, off, size = struct.unpack_from("<IIQQQQ", d, o)
            nm = d[stroff + name : d.index(b"\0", stroff + name)].decode()
            self.sections[nm] = (addr, off, size)
        for s in (".rodata", ".typelink"):
            if s not in self.sections:
                sys.exit(f"no {s} section: not a Go binary with reflection data?")
        # The type data starts at .rodata: name and type offsets are relative to it.
        self.types = self.sections[".rodata"][0]

    def off(self, addr):
        for a, o, s in self.sections.values():
            if a <= addr < a + s and a != 0:
                return addr - a + o
        raise ValueError(f"address {addr:#x} outside the file")

    def u8(self, addr):
        return self.data[self.off(addr)]

    def u64(self, addr):
        return struct.unpack_from("<Q", self.data, self.off(addr))[0]

    def i32(self, addr):
        return struct.unpack_from("<i", self.data, self.off(addr))[0]

    def name(self, addr):
        """A runtime name: flags, varint length, bytes, then (flags & 2) a varint-prefixed tag."""
        p = self.off(addr)
        flags = self.data[p]
        p += 1

        def varint():
            nonlocal p
            n = shift = 0
            while True:
                b = self.data[p]
                p += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    return n

        n = varint()
        text = self.data[p : p + n].decode()
        p += n
        tag = ""
        if flags & 2:
            m = varint()
            tag = self.data[p : p + m].decode()
        return flags, text, tag

    # abi.Type: size, ptrdata, hash u32, tflag u8, align, fieldAlign, kind u8, equal,
    # gcdata, str nameOff i32, ptrToThis i32 (48 bytes); kind-specific data follows.
    def kind(self, t):
        return self.u8(t + 23) & 0x1F

    def type_string(self, t):
        s = self.name(self.types + self.i32(t + 40))[1]
        return s[1:] if self.u8(t + 20) & TFLAG_EXTRA_STAR else s

    def elem(self, t):
        return self.u64(t + 48)

    def map_key_elem(self, t):
        return self.u64(t + 48), self.u64(t + 56)

    def struct_fields(self, t):
        ptr, n = self.u64(t + 56), self.u64(t + 64)
        out = []
        for i in range(n):
            name_ptr, typ, _ = struct.unpack_from("<QQQ", self.data, self.off(ptr + i * 24))
            flags, name, tag = self.name(name_ptr)
            out.append((name, tag, bool(flags & 8), typ))
        return out

    def pkg_path(self, t):
        if not self.u8(t + 20) & TFLAG_UNCOMMON:
            return ""
        # abi.UncommonType follows the kind-specific part (StructType is 80 bytes).
        extra = {K_STRUCT: 80}.get(self.kind(t), 48)
        off = self.i32(t + extra)
        return self.name(self.types + off)[1] if off else ""

    def named_structs(self):
        """(package path, type name) -> struct type address, for every struct reachable from
        the type links."""
        addr, _, size = self.sections[".typelink"]
        seen, out = set(), {}
        stack = [self.types + self.i32(addr + 4 * i) for i in range(size // 4)]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            try:
                k = self.kind(t)
                if k in (K_PTR, K_SLICE):
                    stack.append(self.elem(t))
                elif k == K_MAP:
                    stack.extend(self.map_key_elem(t))
                elif k == K_STRUCT:
                    pkg = self.pkg_path(t)
                    if pkg:
                        name = self.type_string(t).rsplit(".", 1)[-1]
                        out.setdefault((pkg, name), t)
                    stack.extend(f[3] for f in self.struct_fields(t))
            except (ValueError, IndexError, UnicodeDecodeError):
                continue
        return out


def parse_tag(tag, key):
    for part in tag_parts(tag):
        if part[0] == key:
            return part[1]
    return None


def tag_parts(tag):
    # `key:"value" key2:"value2"`
    out, i = [], 0
    while i < len(tag):
        while i < len(tag) and tag[i] == " ":
            i += 1
        j = tag.find(':"', i)
        if j < 0:
            break
        k = tag.find('"', j + 2)
        out.append((tag[i:j], tag[j + 2 : k]))
        i = k + 1
    return out


class Gen:
    def __init__(self, b):
        self.b = b
        self.by_name = b.named_structs()
        self.by_addr = {}
        self.msgs = {}  # ident -> (pkg, name, fields)
        self.order = []

    def ident(self, pkg, name):
        short = pkg.replace("k8s.io/", "").replace("apimachinery/pkg/apis/", "").replace("api/", "")
        return (short.replace("/", "_").replace(".", "_") + "_" + name).upper()

    def special(self, t):
        if self.b.kind(t) != K_STRUCT:
            return None
        key = (self.b.pkg_path(t), self.b.type_string(t).rsplit(".", 1)[-1])
        if key in UNSUPPORTED:
            sys.exit(f"{key[0]}.{key[1]} needs a hand-written decoder (see SPECIAL)")
        return SPECIAL.get(key)

    def message(self, t):
        pkg = self.b.pkg_path(t)
        name = self.b.type_string(t).rsplit(".", 1)[-1]
        ident = self.ident(pkg, name)
        if ident in self.msgs:
            return ident
        self.msgs[ident] = None
        fields = []
        for gname, tag, embedded, ft in self.b.struct_fields(t):
            pb = parse_tag(tag, "protobuf")
            if pb is None:
                continue  # not on the wire (TypeMeta inline in objects, json-only fields)
            parts = pb.split(",")
            num, label = int(parts[1]), parts[2]
            js = parse_tag(tag, "json")
            if js is None:
                jname, omitempty = gname, False
            else:
                opts = js.split(",")
                jname, omitempty = opts[0], "omitempty" in opts[1:]
            if jname == "-":
                continue
            inline = jname == "" and embedded
            if jname == "" and not embedded:
                jname = gname
            pointer = False
            card = "One"
            k = self.b.kind(ft)
            if k == K_PTR:
                pointer, ft = True, self.b.elem(ft)
                k = self.b.kind(ft)
            key_ty = None
            if k == K_SLICE and self.b.kind(self.b.elem(ft)) != K_UINT8:
                card, ft = "Repeated", self.b.elem(ft)
                k = self.b.kind(ft)
                if k == K_PTR:
                    ft = self.b.elem(ft)
                    k = self.b.kind(ft)
            elif k == K_MAP:
                kt, ft = self.b.map_key_elem(ft)
                if self.b.kind(kt) != K_STRING:
                    sys.exit(f"{name}.{gname}: map key of kind {self.b.kind(kt)}")
                card = "Map"
                k = self.b.kind(ft)
            if card == "Map" and k == K_SLICE and self.b.kind(self.b.elem(ft)) == K_STRING:
                # map[string]ExtraValue (a []string): each value a message {1: repeated string}.
                ty = "StringList"
            elif k == K_SLICE and self.b.kind(self.b.elem(ft)) == K_UINT8:
                # []byte (Secret data, ConfigMap binaryData): base64 in JSON.
                ty = "Bytes"
            elif k in SCALARS:
                ty = SCALARS[k]
            elif k == K_STRUCT:
                sp = self.special(ft)
                ty = sp if sp else f"Msg(&{self.message(ft)})"
            else:
                sys.exit(f"{pkg}.{name}.{gname}: unsupported Go kind {k}")
            # The wire type follows the Go type: a few tags say "bytes" for int32 fields
            # (defaultMode) while the generated marshalling writes varints.
            keep_zero = pointer or not omitempty
            fields.append((num, jname, ty, card, keep_zero, inline, label))
        self.msgs[ident] = (pkg, name, fields)
        self.order.append(ident)
        return ident

    def emit(self, roots, version):
        out = []
        w = out.append
        w("// @generated by scripts/gen-protobuf-schema.py from the Go type information of")
        w(f"// kubectl {version}. Do not edit: regenerate.")
        w("//")
        w("// One table per Go struct reachable from the served kinds, fields in Go order:")
        w("// protobuf field number, JSON name, type, cardinality, whether a present zero value")
        w("// is kept (Go pointer, or no `omitempty`), and whether the field is inlined in JSON.")
        w("")
        w("use super::schema_types::{Card, Field, Msg, Ty};")
        w("")
        w("/// (apiVersion, kind, message) of each object a request body may carry; an")
        w('/// apiVersion of "*" matches any.')
        w("pub static ROOTS: &[(&str, &str, &Msg)] = &[")
        for av, kind, ident in roots:
            w(f'    ("{av}", "{kind}", &{ident}),')
        w("];")
        for ident in sorted(self.order):
            pkg, name, fields = self.msgs[ident]
            w("")
            w(f"/// {pkg}.{name}")
            w(f"pub static {ident}: Msg = Msg {{")
            if not fields:
                w("    fields: &[],")
            else:
                w("    fields: &[")
                for num, jname, ty, card, keep_zero, inline, _ in fields:
                    w(
                        f'        Field {{ num: {num}, json: "{jname}", ty: Ty::{ty}, '
                        f"card: Card::{card}, keep_zero: {str(keep_zero).lower()}, "
                        f"inline: {str(inline).lower()} }},"
                    )
                w("    ],")
            w("};")
        return "\n".join(out) + "\n"


def kubectl_version(path):
    import json
    import subprocess

    try:
        out = subprocess.run(
            [path, "version", "--client", "-o", "json"], capture_output=True, check=True
        ).stdout
        return json.loads(out)["clientVersion"]["gitVersion"]
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError):
        return "(unknown version)"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    b = Binary(sys.argv[1])
    g = Gen(b)
    roots = []
    for pkg, name, av, kind in ROOTS:
        t = g.by_name.get((pkg, name))
        if t is None:
            sys.exit(f"{pkg}.{name} not found in the binary")
        roots.append((av, kind, g.message(t)))
    sys.stdout.write(g.emit(roots, kubectl_version(sys.argv[1])))


if __name__ == "__main__":
    main()
