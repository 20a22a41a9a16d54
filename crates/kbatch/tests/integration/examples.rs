//! The manifests in examples/ are valid: the API server accepts each of their objects as it is.

use crate::common;

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

/// The documents of a manifest file (split on `---` lines; the examples use no other
/// YAML stream syntax).
fn documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(last) = docs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.retain(|d| d.lines().any(|l| l.starts_with("kind: ")));
    docs
}

#[tokio::test]
async fn every_example_is_accepted_by_the_api_server() {
    let server = Server::start().await;
    let client = server.client().await;
    let all = examples();
    assert!(all.len() >= 4, "examples missing: {all:?}");
    for (path, text) in all {
        for doc in documents(&text) {
            let kind = doc
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .expect("a kind line")
                .trim()
                .to_string();
            let collection = match kind.as_str() {
                "Job" => "/apis/batch/v1/namespaces/default/jobs",
                "CronJob" => "/apis/batch/v1/namespaces/default/cronjobs",
                "ConfigMap" => "/api/v1/namespaces/default/configmaps",
                "Secret" => "/api/v1/namespaces/default/secrets",
                other => panic!("{path}: unexpected kind {other}"),
            };
            let r = raw(
                &client,
                "POST",
                &format!("{collection}?fieldValidation=Strict"),
                Some("application/yaml"),
                doc.into_bytes(),
            )
            .await;
            assert_eq!(r.status, 201, "{path} ({kind}): {}", r.body);
            assert!(
                !r.headers.contains_key("warning"),
                "{path}: warnings {:?}",
                r.headers.get("warning")
            );
        }
    }
}

#[test]
fn documents_split_on_separator_lines() {
    let docs = documents("# c\nkind: A\n---\n---\nkind: B\nx: 1\n");
    assert_eq!(docs, ["# c\nkind: A\n", "kind: B\nx: 1\n"]);
}
