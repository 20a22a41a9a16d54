//! What the error channel (3) carries when an exec ends, as a Kubernetes client reads it.
//!
//! kubelet's `ServeExec` (pkg/kubelet/cri/streaming/remotecommand/exec.go) ends a session with
//! a `metav1.Status`: Success; for a command that exited non-zero, a Failure with reason
//! `NonZeroExitCode` and the code as the `ExitCode` cause, the message wrapping the runtime's
//! error (containerd's `error executing command [ARGV], exit code N`); for a command that
//! could not run, `NewInternalError` of `error executing command in container: ...`. The v4
//! protocols carry it as JSON (`v4WriteStatusFunc`), the older ones only a failure's message
//! (`v1WriteStatusFunc`). A v5 client (kubectl >= 1.30) reaches upstream's kubelet through
//! kube-apiserver's stream translator (staging/src/k8s.io/apiserver/pkg/util/proxy), which reads
//! kubelet's v4 status with client-go's decoder and writes its own: the exit code again, but
//! the message is client-go's `command terminated with exit code N` wrapped once more, and any
//! other failure becomes an internal error of the decoded message. A v5 client here gets what
//! that chain gives it.

use serde::Serialize;

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Exited 0.
    Success,
    /// Exited with this code (128 + the signal for a killed process, as runc reports it).
    Exit(i32),
    /// Could not be run: the runtime's message.
    Failed(String),
}

/// The shape of the error channel's message, by negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// v1 to v3: a failure's message as text, nothing on success.
    Text,
    /// v4: kubelet's status JSON.
    Kubelet,
    /// v5: the status the API server's stream translator writes.
    Translator,
}

#[derive(Serialize)]
struct Status<'a> {
    metadata: Empty,
    status: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details<'a>>,
    #[serde(skip_serializing_if = "is_zero")]
    code: i32,
}

/// `metav1.ListMeta`, always written (it is a struct, which `omitempty` keeps).
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details<'a> {
    causes: Vec<Cause<'a>>,
}

#[derive(Serialize)]
struct Cause<'a> {
    #[serde(rename = "reason", skip_serializing_if = "str::is_empty")]
    kind: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

const NON_ZERO_EXIT_CODE: &str = "NonZeroExitCode";
const EXIT_CODE_CAUSE: &str = "ExitCode";

/// A failed end as a status says it.
struct Failure {
    message: String,
    reason: &'static str,
    cause_kind: &'static str,
    cause: String,
    code: i32,
}

/// The error channel's message for `end` of `argv`, or `None` when nothing is written.
pub fn message(format: Format, argv: &[String], end: &End) -> Option<Vec<u8>> {
    let failure = match end {
        End::Success => None,
        End::Exit(code) => {
            let error = match format {
                // client-go's decoding of kubelet's status, on the translator's side.
                Format::Translator => format!("command terminated with exit code {code}"),
                // containerd's error for the exec's exit.
                Format::Text | Format::Kubelet => format!(
                    "error executing command [{}], exit code {code}",
                    argv.join(" ")
                ),
            };
            Some(Failure {
                message: format!("command terminated with non-zero exit code: {error}"),
                reason: NON_ZERO_EXIT_CODE,
                cause_kind: EXIT_CODE_CAUSE,
                cause: code.to_string(),
                code: 0,
            })
        }
        End::Failed(runtime) => {
            let mut error = format!("error executing command in container: {runtime}");
            if format == Format::Translator {
                // The translator gets kubelet's internal error as a plain error of its message.
                error = format!("Internal error occurred: {error}");
            }
            Some(Failure {
                message: format!("Internal error occurred: {error}"),
                reason: "InternalError",
                cause_kind: "",
                cause: error,
                code: 500,
            })
        }
    };
    if format == Format::Text {
        return failure.map(|f| f.message.into_bytes());
    }
    let status = match &failure {
        None => Status {
            metadata: Empty {},
            status: "Success",
            message: "",
            reason: "",
            details: None,
            code: 0,
        },
        Some(f) => Status {
            metadata: Empty {},
            status: "Failure",
            message: &f.message,
            reason: f.reason,
            details: Some(Details {
                causes: vec![Cause {
                    kind: f.cause_kind,
                    message: &f.cause,
                }],
            }),
            code: f.code,
        },
    };
    let json = serde_json::to_string(&status).ok()?;
    Some(go_escape(&json).into_bytes())
}

/// Go's `json.Marshal` escapes `<`, `>` and `&` (and U+2028, U+2029) in strings; those
/// characters can only occur inside strings in JSON text, so replacing them anywhere is exact.
fn go_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(format: Format, argv: &[&str], end: End) -> Option<String> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        message(format, &argv, &end).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn kubelet_status_json() {
        assert_eq!(
            text(Format::Kubelet, &["true"], End::Success).unwrap(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            text(Format::Kubelet, &["sh", "-c", "exit 3"], End::Exit(3)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        assert_eq!(
            text(
                Format::Kubelet,
                &["nope"],
                End::Failed(r#"exec: "nope": executable file not found in $PATH"#.into())
            )
            .unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: exec: \"nope\": executable file not found in $PATH","reason":"InternalError","details":{"causes":[{"message":"error executing command in container: exec: \"nope\": executable file not found in $PATH"}]},"code":500}"#
        );
        // Go's HTML escaping.
        assert_eq!(
            text(Format::Kubelet, &["sh", "-c", "a > b && c"], End::Exit(1)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c a \u003e b \u0026\u0026 c], exit code 1","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"1"}]}}"#
        );
    }

    #[test]
    fn translator_status_json() {
        assert_eq!(
            text(Format::Translator, &["true"], End::Success).unwrap(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            text(Format::Translator, &["sh", "-c", "exit 3"], End::Exit(3)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: command terminated with exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        assert_eq!(
            text(Format::Translator, &["nope"], End::Failed("boom".into())).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: Internal error occurred: error executing command in container: boom","reason":"InternalError","details":{"causes":[{"message":"Internal error occurred: error executing command in container: boom"}]},"code":500}"#
        );
    }

    #[test]
    fn text_status_is_a_failure_message() {
        assert_eq!(text(Format::Text, &["true"], End::Success), None);
        assert_eq!(
            text(Format::Text, &["false"], End::Exit(1)).unwrap(),
            "command terminated with non-zero exit code: error executing command [false], exit code 1"
        );
    }
}
