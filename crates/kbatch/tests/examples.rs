//! The manifests in examples/ are valid: the API server accepts each one as it is.

mod common;

use common::{Server, raw};

fn examples() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("examples/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable example");
            (p.display().to_string(), text)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn every_example_is_accepted_by_the_api_server() {
    let server = Server::start().await;
    let client = server.client().await;
    let all = examples();
    assert!(all.len() >= 4, "examples missing: {all:?}");
    for (path, text) in all {
        let kind = text
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .expect("a kind line")
            .trim()
            .to_string();
        let plural = match kind.as_str() {
            "Job" => "jobs",
            "CronJob" => "cronjobs",
            other => panic!("{path}: unexpected kind {other}"),
        };
        let r = raw(
            &client,
            "POST",
            &format!("/apis/batch/v1/namespaces/default/{plural}?fieldValidation=Strict"),
            Some("application/yaml"),
            text.into_bytes(),
        )
        .await;
        assert_eq!(r.status, 201, "{path}: {}", r.body);
        assert!(
            !r.headers.contains_key("warning"),
            "{path}: warnings {:?}",
            r.headers.get("warning")
        );
    }
}
