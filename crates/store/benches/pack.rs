//! What packing costs and saves: the store keeps every document LZ4-compressed against its
//! dictionary, packed on the writing caller's task and unpacked for every reader.
//!
//! `cargo bench -p kbatch-store --bench pack [-- N]` prints, for a Pod, a Job, a CronJob and
//! two Events as kbatch writes them, made into other objects of their kind (another name,
//! every digit of every string changed: uids, times, versions), the JSON and packed sizes;
//! µs to hand the document to the store (`Object::from_json`: serialize, pack, free the tree)
//! against serializing and freeing alone (`serde_json::to_vec`); and µs to read it back
//! (`Object::raw`: unpack, stamp), over N rounds (default 20,000).

use std::hint::black_box;
use std::time::Instant;

use kbatch_store::Object;
use serde_json::{Value, json};

/// Every digit of every string moved on by 3: another uid, other times and versions.
fn other_digits(v: &mut Value) {
    match v {
        Value::String(s) => {
            *s = s
                .chars()
                .map(|c| match c.to_digit(10) {
                    Some(d) => char::from_digit((d + 3) % 10, 10).unwrap_or(c),
                    None => c,
                })
                .collect();
        }
        Value::Array(items) => items.iter_mut().for_each(other_digits),
        Value::Object(map) => map.values_mut().for_each(other_digits),
        _ => {}
    }
}

fn samples() -> Vec<(String, Value)> {
    let dictionary = include_str!("../src/pack/dictionary-1.json");
    dictionary
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|mut doc| {
            let kind = doc["kind"].as_str().unwrap_or("?").to_string();
            other_digits(&mut doc);
            doc["metadata"]["name"] = json!("nightly-report-28190415-x7k2p");
            (kind, doc)
        })
        .collect()
}

fn micros_per(rounds: u32, started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
}

fn main() {
    let rounds: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    println!(
        "{:<8} {:>6} {:>7} {:>6} {:>10} {:>10} {:>10}",
        "kind", "JSON B", "packed", "ratio", "to_vec µs", "store µs", "raw() µs"
    );
    for (kind, doc) in samples() {
        let object = match Object::from_json("/bench/ns/name".into(), 123_456, doc.clone()) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{kind}: {e}");
                continue;
            }
        };
        // Both take a fresh copy of the tree and free it, as a write does.
        let started = Instant::now();
        for _ in 0..rounds {
            let copy = black_box(doc.clone());
            black_box(serde_json::to_vec(&copy).map(|v| v.len()).ok());
        }
        let to_vec = micros_per(rounds, started);
        let started = Instant::now();
        for _ in 0..rounds {
            let copy = black_box(doc.clone());
            black_box(Object::from_json("/bench/ns/name".into(), 123_456, copy).ok());
        }
        let store = micros_per(rounds, started);
        let started = Instant::now();
        for _ in 0..rounds {
            black_box(black_box(&object).raw());
        }
        let unpack = micros_per(rounds, started);
        let json_len = object.raw_len();
        println!(
            "{kind:<8} {json_len:>6} {:>7} {:>5.1}x {to_vec:>10.2} {store:>10.2} {unpack:>10.2}",
            object.packed_len(),
            json_len as f64 / object.packed_len() as f64,
        );
    }
}
