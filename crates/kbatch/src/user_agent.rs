//! The User-Agent of kbatch's own API clients. The API server names the field manager of a
//! write after it (the part before the first `/`), so the controllers' and the executor's
//! writes show up in managedFields as upstream's do: `kube-controller-manager` and `kubelet`.

use anyhow::Context;
use http::{HeaderValue, header::USER_AGENT};

/// The component name the controllers' client sends.
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// The component name the executor's client sends.
pub const KUBELET: &str = "kubelet";

/// `config` with a client-go style User-Agent for `component`:
/// `NAME/vVERSION (OS/ARCH) kbatch`.
pub fn with_user_agent(mut config: kube::Config, component: &str) -> anyhow::Result<kube::Config> {
    let value = format!(
        "{component}/v{} ({}/{}) kbatch",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        go_arch(std::env::consts::ARCH),
    );
    let value = HeaderValue::from_str(&value).context("building the User-Agent header")?;
    config.headers.retain(|(name, _)| name != USER_AGENT);
    config.headers.push((USER_AGENT, value));
    Ok(config)
}

/// Go's name for the architecture, as client-go puts it in the User-Agent.
fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_starts_with_the_component() -> anyhow::Result<()> {
        let url = "http://127.0.0.1:1".parse()?;
        let config = with_user_agent(kube::Config::new(url), KUBELET)?;
        let config = with_user_agent(config, CONTROLLER_MANAGER)?;
        let agents: Vec<&str> = config
            .headers
            .iter()
            .filter(|(n, _)| n == USER_AGENT)
            .filter_map(|(_, v)| v.to_str().ok())
            .collect();
        assert_eq!(agents.len(), 1, "{agents:?}");
        assert!(
            agents[0].starts_with("kube-controller-manager/v"),
            "{}",
            agents[0]
        );
        Ok(())
    }
}
