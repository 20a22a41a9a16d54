//! The kubeconfig `kbatch up` writes so that kubectl and other clients find the server.

use std::path::Path;

use anyhow::Context;
use base64::Engine;

/// How clients authenticate: nothing on loopback; over TLS, the CA to trust and a token.
pub enum Access<'a> {
    Plain,
    Tls { ca_pem: &'a str, token: &'a str },
}

/// YAML text of a kubeconfig with one cluster, user and context, all named `kbatch`.
pub fn render(server_url: &str, access: &Access<'_>) -> String {
    let (cluster_extra, user) = match access {
        Access::Plain => (String::new(), " {}".to_string()),
        Access::Tls { ca_pem, token } => (
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(ca_pem)
            ),
            format!("\n    token: {token}"),
        ),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kbatch
  cluster:
    server: {server_url}{cluster_extra}
users:
- name: kbatch
  user:{user}
contexts:
- name: kbatch
  context:
    cluster: kbatch
    user: kbatch
    namespace: default
current-context: kbatch
preferences: {{}}
"
    )
}

/// Write atomically (temp file + rename) so a reader never sees half a file. Readable by the
/// owner only when it holds a token.
pub fn write(path: &Path, server_url: &str, access: &Access<'_>) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mode = match access {
        Access::Plain => 0o644,
        Access::Tls { .. } => 0o600,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(render(server_url, access).as_bytes())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_kubeconfig_carries_the_ca_and_the_token() {
        let text = render(
            "https://127.0.0.1:6443",
            &Access::Tls {
                ca_pem: "PEM",
                token: "abc",
            },
        );
        assert!(
            text.contains("server: https://127.0.0.1:6443\n    certificate-authority-data: UEVN\n")
        );
        assert!(text.contains("  user:\n    token: abc\n"), "{text}");
        let plain = render("http://127.0.0.1:6443", &Access::Plain);
        assert!(plain.contains("  user: {}\n"), "{plain}");
        assert!(!plain.contains("token"));
    }
}
