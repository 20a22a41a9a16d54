//! The kubeconfig `kbatch up` writes so that kubectl and other clients find the server.

use std::path::Path;

use anyhow::Context;

/// YAML text of a kubeconfig with one cluster, user and context, all named `kbatch`.
pub fn render(server_url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kbatch
  cluster:
    server: {server_url}
users:
- name: kbatch
  user: {{}}
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

/// Write atomically (temp file + rename) so a reader never sees half a file.
pub fn write(path: &Path, server_url: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, render(server_url))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
