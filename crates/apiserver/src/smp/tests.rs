use serde_json::{Value, json};

use super::schema::{atomic, merge_by, merge_set, nested, replace};
use super::*;

/// The `MergeItem` test type of upstream's patch tests, as a schema: merging and non-merging
/// lists of itself, merging and non-merging int lists, a plain map and a retainKeys item.
/// Upstream's type is recursive; a few levels are enough for every case here.
fn merge_item() -> Schema {
    fn level(depth: usize) -> Schema {
        let child = if depth == 0 {
            Schema::default()
        } else {
            level(depth - 1)
        };
        let retain_keys_item = Schema::object(vec![
            ("mergingIntList", merge_set()),
            ("mergingList", merge_by("name", child.clone())),
            ("nonMergingList", atomic()),
        ]);
        Schema::object(vec![
            ("mergingList", merge_by("name", child.clone())),
            ("nonMergingList", atomic()),
            ("mergingIntList", merge_set()),
            ("nonMergingIntList", atomic()),
            ("mergeItemPtr", merge_by("name", child.clone())),
            ("simpleMap", nested(Schema::default())),
            ("retainKeysMap", nested(retain_keys_item)),
            ("retainKeysMergingList", merge_by("name", child)),
            ("replacingItem", replace()),
        ])
    }
    level(4)
}

fn smp(original: Value, patch: Value) -> Value {
    apply(&original, &patch, &merge_item()).unwrap_or_else(|e| panic!("patch failed: {e}"))
}

fn smp_err(original: Value, patch: Value) -> SmpError {
    match apply(&original, &patch, &merge_item()) {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e,
    }
}

/// Apply and compare, including the order of every list.
fn check(original: Value, patch: Value, expected: Value) {
    let got = smp(original, patch);
    assert_eq!(got, expected, "\n got: {got}\nwant: {expected}");
}

// ---------------------------------------------------------------------------------------------
// Maps and null deletion

#[test]
fn nil_original_takes_patch() {
    check(
        json!({}),
        json!({"name": 1, "value": 1}),
        json!({"name": 1, "value": 1}),
    );
}

#[test]
fn empty_patch_is_identity() {
    check(json!({"name": 1}), json!({}), json!({"name": 1}));
}

#[test]
fn add_field_keeps_server_fields() {
    check(
        json!({"name": 1, "other": "a"}),
        json!({"value": 1}),
        json!({"name": 1, "value": 1, "other": "a"}),
    );
}

#[test]
fn add_and_delete_field() {
    check(
        json!({"name": 1, "other": "a"}),
        json!({"name": null, "value": 1}),
        json!({"value": 1, "other": "a"}),
    );
}

#[test]
fn delete_field_from_nested_map() {
    check(
        json!({"simpleMap": {"key1": 1, "key2": 1, "other": "a"}}),
        json!({"simpleMap": {"key2": null}}),
        json!({"simpleMap": {"key1": 1, "other": "a"}}),
    );
}

#[test]
fn delete_all_fields_from_map() {
    check(
        json!({"name": 1, "value": 1, "other": "a"}),
        json!({"name": null, "value": null}),
        json!({"other": "a"}),
    );
}

#[test]
fn null_for_missing_key_is_ignored() {
    // Upstream's IgnoreUnmatchedNulls: a null for a key the object lacks leaves no trace.
    check(
        json!({"name": "a", "other": "a"}),
        json!({"name": 1, "value": 1, "other": null}),
        json!({"name": 1, "value": 1}),
    );
    check(
        json!({"name": "n"}),
        json!({"simpleMap": {"gone": null, "kept": "x"}}),
        json!({"name": "n", "simpleMap": {"kept": "x"}}),
    );
}

#[test]
fn kind_change_replaces() {
    check(
        json!({"simpleMap": {"a": "b"}}),
        json!({"simpleMap": "x"}),
        json!({"simpleMap": "x"}),
    );
    check(
        json!({"simpleMap": "x"}),
        json!({"simpleMap": {"a": "b"}}),
        json!({"simpleMap": {"a": "b"}}),
    );
}

// ---------------------------------------------------------------------------------------------
// $patch directives on maps

#[test]
fn patch_delete_on_nested_map() {
    check(
        json!({"simpleMap": {"key1": 1, "key2": 1}}),
        json!({"simpleMap": {"$patch": "delete"}}),
        json!({"simpleMap": {}}),
    );
}

#[test]
fn patch_replace_on_whole_object() {
    check(
        json!({"name": 1, "value": 1}),
        json!({"$patch": "replace"}),
        json!({}),
    );
    check(
        json!({"name": 1, "value": 1}),
        json!({"other": "a", "$patch": "replace"}),
        json!({"other": "a"}),
    );
}

#[test]
fn patch_replace_on_nested_map_resolves_nested_directives() {
    check(
        json!({"simpleMap": {"a": "1"}, "name": "n"}),
        json!({"simpleMap": {"$patch": "replace", "b": "2", "c": null}}),
        json!({"simpleMap": {"b": "2"}, "name": "n"}),
    );
}

#[test]
fn unknown_patch_directive_in_map_is_rejected() {
    let e = smp_err(
        json!({"simpleMap": {}}),
        json!({"simpleMap": {"$patch": "foo", "a": "b"}}),
    );
    assert_eq!(
        e.to_string(),
        "unknown patch type: foo in map: map[$patch:foo a:b]"
    );
    assert_eq!(e.code(), 422, "client input never gets a 5xx");
    // `$patch: merge` is a list-element directive; upstream refuses it in a map.
    let e = smp_err(json!({}), json!({"$patch": "merge"}));
    assert_eq!(
        e.to_string(),
        "unknown patch type: merge in map: map[$patch:merge]"
    );
    let e = smp_err(json!({}), json!({"$patch": 3}));
    assert_eq!(
        e.to_string(),
        "unknown patch type: %!s(int64=3) in map: map[$patch:3]"
    );
}

// ---------------------------------------------------------------------------------------------
// Atomic lists

#[test]
fn non_merging_lists_are_replaced() {
    check(
        json!({"nonMergingIntList": [1, 4]}),
        json!({"nonMergingIntList": [2, 3]}),
        json!({"nonMergingIntList": [2, 3]}),
    );
    check(
        json!({"nonMergingList": [{"name": 1, "value": "a"}, {"name": 2}]}),
        json!({"nonMergingList": [{"name": 2, "value": "b"}]}),
        json!({"nonMergingList": [{"name": 2, "value": "b"}]}),
    );
}

#[test]
fn schemaless_fields_merge_maps_and_replace_lists() {
    let s = Schema::schemaless();
    let got = apply(
        &json!({"a": {"b": 1, "c": [1, 2]}, "d": [{"name": "x"}]}),
        &json!({"a": {"e": 2, "c": [3]}, "d": [{"name": "y"}]}),
        &s,
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"a": {"b": 1, "c": [3], "e": 2}, "d": [{"name": "y"}]})
    );
}

// ---------------------------------------------------------------------------------------------
// Merging lists of maps

#[test]
fn merge_lists_of_maps_by_key() {
    check(
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 4}, {"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}]
        }),
        json!({"mergingList": [
            {"name": 4, "value": 4},
            {"name": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
            {"name": 3, "value": 3}
        ]}),
    );
}

#[test]
fn merge_lists_of_maps_with_conflict() {
    check(
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 3, "other": "b"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 2, "value": 2}, {"name": 3, "value": 3}]
        }),
        json!({"mergingList": [
            {"name": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
            {"name": 3, "value": 3}
        ]}),
    );
}

#[test]
fn add_field_to_map_in_merging_list() {
    check(
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
            "mergingList": [{"name": 1, "value": 1}]
        }),
        json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"}
        ]}),
    );
}

#[test]
fn delete_field_from_map_in_merging_list() {
    check(
        json!({"mergingList": [{"name": 1, "value": 1, "other": "a"}, {"name": 2, "value": 2}]}),
        json!({"mergingList": [{"name": 1, "value": null}]}),
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2}]}),
    );
}

#[test]
fn missing_merge_key_is_an_error() {
    let e = smp_err(
        json!({"mergingList": [{"name": 1, "value": "a"}]}),
        json!({"mergingList": [{"value": "b"}]}),
    );
    assert_eq!(
        e.to_string(),
        "map: map[value:b] does not contain declared merge key: name"
    );
}

#[test]
fn preserve_the_order_from_the_patch() {
    check(
        json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]}),
        json!({"mergingList": [
            {"name": 3, "value": "c"}, {"name": 1, "value": "a"}, {"name": 2, "other": "x"}
        ]}),
        json!({"mergingList": [
            {"name": 3, "value": "c"},
            {"name": 1, "value": "a"},
            {"name": 2, "value": "b", "other": "x"}
        ]}),
    );
}

#[test]
fn server_only_items_keep_their_place() {
    check(
        json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]}),
        json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}]}),
        json!({"mergingList": [
            {"name": 2, "value": "b"},
            {"name": 3, "value": "c"},
            {"name": 1, "value": "a"}
        ]}),
    );
    // A new element lands after the server-only ones that precede the next known element.
    check(
        json!({"mergingList": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        json!({"mergingList": [{"name": "b", "value": 1}, {"name": "d"}]}),
        json!({"mergingList": [
            {"name": "a"}, {"name": "b", "value": 1}, {"name": "d"}, {"name": "c"}
        ]}),
    );
}

#[test]
fn nested_merging_lists() {
    check(
        json!({"mergingList": [
            {"name": 1, "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]},
            {"name": 2}
        ]}),
        json!({"mergingList": [
            {"name": 1, "mergingList": [{"name": 2, "value": 3}, {"name": 3, "value": 3}]}
        ]}),
        json!({"mergingList": [
            {"name": 1, "mergingList": [
                {"name": 1, "value": 1}, {"name": 2, "value": 3}, {"name": 3, "value": 3}
            ]},
            {"name": 2}
        ]}),
    );
}

#[test]
fn merge_into_missing_list_resolves_directives() {
    check(
        json!({"name": "x"}),
        json!({"mergingList": [{"name": 1, "value": null, "other": "a"}, {"name": 2, "$patch": "delete"}]}),
        json!({"name": "x", "mergingList": [{"name": 1, "other": "a"}]}),
    );
}

#[test]
fn merge_empty_merging_lists() {
    check(
        json!({"mergingList": []}),
        json!({"mergingList": []}),
        json!({"mergingList": []}),
    );
}

// ---------------------------------------------------------------------------------------------
// $patch: delete / replace inside lists

#[test]
fn delete_maps_from_merging_list() {
    check(
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
        json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        json!({"mergingList": []}),
    );
    check(
        json!({"mergingList": []}),
        json!({"mergingList": [{"name": 1, "$patch": "delete"}]}),
        json!({"mergingList": []}),
    );
}

#[test]
fn delete_removes_every_duplicate() {
    check(
        json!({"mergingList": [
            {"name": 1}, {"name": 1}, {"name": 2, "value": "a"}, {"name": 3}, {"name": 3}
        ]}),
        json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 3, "$patch": "delete"}]}),
        json!({"mergingList": [{"name": 2, "value": "a"}]}),
    );
}

#[test]
fn delete_directive_needs_the_merge_key() {
    let e = smp_err(
        json!({"mergingList": [{"name": 1}]}),
        json!({"mergingList": [{"$patch": "delete", "value": 1}]}),
    );
    assert_eq!(
        e.to_string(),
        "map: map[$patch:delete value:1] does not contain declared merge key: name"
    );
}

#[test]
fn replace_directive_in_list() {
    check(
        json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        json!({"mergingList": [{"$patch": "replace"}]}),
        json!({"mergingList": []}),
    );
    check(
        json!({"mergingList": [{"name": 1, "value": "a"}, {"name": 2}]}),
        json!({"mergingList": [{"name": 3, "other": "c"}, {"$patch": "replace"}, {"name": 1}]}),
        json!({"mergingList": [{"name": 3, "other": "c"}, {"name": 1}]}),
    );
}

#[test]
fn list_directive_errors() {
    let e = smp_err(
        json!({"mergingList": [{"name": 1}]}),
        json!({"mergingList": [{"$patch": "merge"}]}),
    );
    assert_eq!(e, SmpError::MergingListsUnsupported);
    let e = smp_err(
        json!({"mergingList": [{"name": 1}]}),
        json!({"mergingList": [{"$patch": "frob", "name": 1}]}),
    );
    assert_eq!(
        e.to_string(),
        "unknown patch type: frob in map: map[$patch:frob name:1]"
    );
}

// ---------------------------------------------------------------------------------------------
// Merging lists of scalars (sets) and $deleteFromPrimitiveList

#[test]
fn unique_scalars_when_merging_lists() {
    check(
        json!({"mergingIntList": [1, 2]}),
        json!({"mergingIntList": [2, 3]}),
        json!({"mergingIntList": [1, 2, 3]}),
    );
}

#[test]
fn scalar_set_order_follows_patch() {
    check(
        json!({"mergingIntList": [1, 2, 3]}),
        json!({"mergingIntList": [3, 1, 2]}),
        json!({"mergingIntList": [3, 1, 2]}),
    );
    check(
        json!({"mergingIntList": [1, 2, 3]}),
        json!({"mergingIntList": [3, 1]}),
        json!({"mergingIntList": [2, 3, 1]}),
    );
}

#[test]
fn delete_from_primitive_list() {
    check(
        json!({"mergingIntList": [1, 2, 3, 4]}),
        json!({"$setElementOrder/mergingIntList": [1, 2], "$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"mergingIntList": [1, 2, 4]}),
    );
    check(
        json!({"mergingIntList": [1, 2, 3, 3, 4]}),
        json!({"$setElementOrder/mergingIntList": [1, 2], "$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"mergingIntList": [1, 2, 4]}),
    );
}

#[test]
fn add_and_delete_in_primitive_list() {
    check(
        json!({"mergingIntList": [1, 2, 3]}),
        json!({
            "$setElementOrder/mergingIntList": [1, 2, 4],
            "$deleteFromPrimitiveList/mergingIntList": [3],
            "mergingIntList": [4]
        }),
        json!({"mergingIntList": [1, 2, 4]}),
    );
}

#[test]
fn delete_from_missing_primitive_list_adds_nothing() {
    check(
        json!({"name": "a"}),
        json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"name": "a"}),
    );
}

#[test]
fn bad_primitive_list_directives() {
    assert_eq!(
        smp_err(
            json!({}),
            json!({"$deleteFromPrimitiveListmergingIntList": [1]})
        ),
        SmpError::BadPatchFormatForPrimitiveList
    );
    assert_eq!(
        smp_err(
            json!({"mergingIntList": [1]}),
            json!({"$deleteFromPrimitiveList/mergingIntList": 1})
        ),
        SmpError::BadPatchFormatForPrimitiveList
    );
    assert_eq!(SmpError::BadPatchFormatForPrimitiveList.code(), 400);
}

#[test]
fn mixed_element_types_are_rejected() {
    let e = smp_err(
        json!({"mergingIntList": [1]}),
        json!({"mergingIntList": ["a"]}),
    );
    assert_eq!(
        e.to_string(),
        "list element types are not identical: [[1] [a]]"
    );
    let e = smp_err(
        json!({"mergingIntList": [[1]]}),
        json!({"mergingIntList": [[2]]}),
    );
    assert_eq!(e, SmpError::NoListOfLists);
    assert_eq!(e.code(), 422);
}

// ---------------------------------------------------------------------------------------------
// $setElementOrder

#[test]
fn set_element_order_with_item_not_in_list() {
    check(
        json!({"mergingList": [{"name": 1}, {"name": 3}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 3}, {"name": 2}, {"name": 1}],
            "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]
        }),
        json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
    );
    check(
        json!({"mergingIntList": [1, 3]}),
        json!({"$setElementOrder/mergingIntList": [3, 2, 1]}),
        json!({"mergingIntList": [3, 1]}),
    );
}

#[test]
fn set_element_order_must_match_patch_order() {
    let e = smp_err(
        json!({"mergingList": [{"name": 1}, {"name": 3}, {"name": 2}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]
        }),
    );
    assert!(e.to_string().contains("doesn't match"), "{e}");
    let e = smp_err(
        json!({"mergingIntList": [1, 3, 2]}),
        json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]}),
    );
    assert_eq!(
        e.to_string(),
        "The order in patch list:\n[3 1]\n doesn't match $setElementOrder list:\n[1 2 3]\n"
    );
}

#[test]
fn set_element_order_reorders_without_changes() {
    check(
        json!({"mergingList": [{"name": 1, "value": "a"}, {"name": 2, "value": "b"}]}),
        json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}]}),
        json!({"mergingList": [{"name": 2, "value": "b"}, {"name": 1, "value": "a"}]}),
    );
}

#[test]
fn set_element_order_keeps_unmentioned_server_items() {
    // Item 9 was added on the server; it keeps its place relative to the listed items.
    check(
        json!({"mergingList": [{"name": 1}, {"name": 9}, {"name": 2}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 3}]
        }),
        json!({"mergingList": [{"name": 1}, {"name": 9}, {"name": 2}, {"name": 3}]}),
    );
}

#[test]
fn set_element_order_with_deletion() {
    check(
        json!({"mergingList": [{"name": 1}, {"name": 2}, {"name": 3}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 3}, {"name": 1}],
            "mergingList": [{"name": 2, "$patch": "delete"}]
        }),
        json!({"mergingList": [{"name": 3}, {"name": 1}]}),
    );
}

#[test]
fn bad_set_element_order_directives() {
    assert_eq!(
        smp_err(json!({}), json!({"$setElementOrderX": []})),
        SmpError::BadPatchFormatForSetElementOrderList
    );
    assert_eq!(
        smp_err(json!({}), json!({"$setElementOrder/mergingList": "x"})).to_string(),
        "expected a []interface {}, but received a string"
    );
    assert_eq!(
        smp_err(
            json!({"mergingList": [{"name": 1}]}),
            json!({"$setElementOrder/mergingList": [{"value": 1}], "mergingList": [{"name": 1}]})
        )
        .to_string(),
        "map: map[value:1] does not contain declared merge key: name"
    );
}

// ---------------------------------------------------------------------------------------------
// $retainKeys

#[test]
fn retain_keys_clears_unlisted_fields() {
    check(
        json!({"retainKeysMap": {"name": "foo", "value": "a", "other": "b"}}),
        json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "c"}}),
        json!({"retainKeysMap": {"name": "foo", "value": "c"}}),
    );
}

#[test]
fn retain_keys_with_nulls_and_parallel_lists() {
    check(
        json!({"retainKeysMap": {"name": "foo", "value": "a", "mergingIntList": [1, 2]}}),
        json!({"retainKeysMap": {
            "$retainKeys": ["name", "mergingIntList"],
            "value": null,
            "$setElementOrder/mergingIntList": [1],
            "$deleteFromPrimitiveList/mergingIntList": [2]
        }}),
        json!({"retainKeysMap": {"name": "foo", "mergingIntList": [1]}}),
    );
}

#[test]
fn retain_keys_in_merging_list_elements() {
    check(
        json!({"retainKeysMergingList": [
            {"name": "bar"}, {"name": "foo", "value": "a", "other": "o"}
        ]}),
        json!({"retainKeysMergingList": [
            {"name": "foo", "$retainKeys": ["name", "other"], "other": "p"}
        ]}),
        json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "other": "p"}]}),
    );
}

#[test]
fn retain_keys_without_directive_merges() {
    check(
        json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
        json!({"retainKeysMap": {"value": "b"}}),
        json!({"retainKeysMap": {"name": "foo", "value": "b"}}),
    );
    check(
        json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
        json!({"retainKeysMap": {}}),
        json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
    );
}

#[test]
fn retain_keys_errors() {
    assert_eq!(
        smp_err(
            json!({"retainKeysMap": {"name": "foo"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name"], "value": "x"}})
        ),
        SmpError::BadPatchFormatForRetainKeys
    );
    assert_eq!(
        smp_err(json!({}), json!({"$retainKeys": "name"})),
        SmpError::BadPatchFormatForRetainKeys
    );
}

// ---------------------------------------------------------------------------------------------
// Documents and errors

#[test]
fn documents_must_be_objects() {
    let s = Schema::for_kind("Job");
    assert_eq!(apply(&json!({}), &json!([]), &s), Err(SmpError::BadJsonDoc));
    assert_eq!(apply(&json!(1), &json!({}), &s), Err(SmpError::BadJsonDoc));
    let e = SmpError::BadJsonDoc.to_api_error();
    assert_eq!(
        (e.code, e.reason, e.message.as_str()),
        (400, "BadRequest", "invalid JSON document")
    );
    let e = SmpError::NoListOfLists.to_api_error();
    assert_eq!((e.code, e.reason), (422, "Invalid"));
}

// ---------------------------------------------------------------------------------------------
// The served types

fn realistic_job() -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "pi",
            "namespace": "default",
            "uid": "0b6a7e0c-1a51-4d0f-9d59-3f9b2c1f8e11",
            "resourceVersion": "41",
            "generation": 1,
            "creationTimestamp": "2026-11-21T13:00:00Z",
            "labels": {"app": "pi", "tier": "batch"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"old\":true}\n"
            },
            "finalizers": ["batch.kubernetes.io/job-tracking"]
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": false,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "0b6a7e0c"}},
            "template": {
                "metadata": {"labels": {"app": "pi", "batch.kubernetes.io/controller-uid": "0b6a7e0c"}},
                "spec": {
                    "containers": [
                        {
                            "name": "pi",
                            "image": "perl:5.34.0",
                            "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"],
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"
                        }
                    ],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler"
                }
            }
        },
        "status": {
            "startTime": "2026-11-21T13:00:01Z",
            "active": 1,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {}
        }
    })
}

/// `kubectl apply` of a changed manifest (reference section 1, "Changed object").
#[test]
fn kubectl_apply_changed_object() {
    let patch = json!({
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}\n"}},
        "spec": {"backoffLimit": 3, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "pi"}],
            "containers": [{"command": ["sh", "-c", "echo changed"], "name": "pi"}]
        }}}
    });
    let got = apply(&realistic_job(), &patch, &Schema::for_kind("Job")).unwrap();
    let mut want = realistic_job();
    want["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!("{\"new\":true}\n");
    want["spec"]["backoffLimit"] = json!(3);
    want["spec"]["template"]["spec"]["containers"][0]["command"] =
        json!(["sh", "-c", "echo changed"]);
    assert_eq!(got, want);
    // The container keeps its other fields and its place; nothing else changed.
    assert_eq!(
        got["spec"]["template"]["spec"]["containers"][0]["image"],
        json!("perl:5.34.0")
    );
}

/// `kubectl apply` after removing a label from the manifest.
#[test]
fn kubectl_apply_label_removal() {
    let patch = json!({"metadata": {"labels": {"tier": null}}});
    let got = apply(&realistic_job(), &patch, &Schema::for_kind("Job")).unwrap();
    let mut want = realistic_job();
    want["metadata"]["labels"] = json!({"app": "pi"});
    assert_eq!(got, want);
}

/// `kubectl apply` after removing an env var and a whole container.
#[test]
fn kubectl_apply_env_and_container_deletion() {
    let mut job = realistic_job();
    job["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "a", "image": "busybox:1",
         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
        {"name": "b", "image": "busybox:1"}
    ]);
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "a"}],
        "containers": [
            {"$setElementOrder/env": [{"name": "B"}],
             "env": [{"$patch": "delete", "name": "A"}],
             "image": "busybox:2", "name": "a"},
            {"$patch": "delete", "name": "b"}
        ]
    }}}});
    let got = apply(&job, &patch, &Schema::for_kind("Job")).unwrap();
    let mut want = job.clone();
    want["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "a", "image": "busybox:2", "env": [{"name": "B", "value": "2"}]}
    ]);
    assert_eq!(got, want);
    // The same element deletions without the ordering directives.
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"env": [{"$patch": "delete", "name": "A"}], "image": "busybox:2", "name": "a"},
        {"$patch": "delete", "name": "b"}
    ]}}}});
    assert_eq!(apply(&job, &patch, &Schema::for_kind("Job")).unwrap(), want);
}

#[test]
fn kubectl_patch_suspend() {
    let got = apply(
        &realistic_job(),
        &json!({"spec": {"suspend": true}}),
        &Schema::for_kind("Job"),
    )
    .unwrap();
    let mut want = realistic_job();
    want["spec"]["suspend"] = json!(true);
    assert_eq!(got, want);
}

#[test]
fn job_status_conditions_merge_by_type() {
    let mut job = realistic_job();
    job["status"]["conditions"] = json!([
        {"type": "SuccessCriteriaMet", "status": "True"}
    ]);
    let patch = json!({"status": {"conditions": [
        {"type": "Complete", "status": "True"},
        {"type": "SuccessCriteriaMet", "reason": "CompletionsReached"}
    ]}});
    let got = apply(&job, &patch, &Schema::for_kind("Job")).unwrap();
    assert_eq!(
        got["status"]["conditions"],
        json!([
            {"type": "Complete", "status": "True"},
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"}
        ])
    );
}

#[test]
fn finalizers_are_a_set() {
    let got = apply(
        &realistic_job(),
        &json!({"metadata": {"finalizers": ["example.com/x", "batch.kubernetes.io/job-tracking"]}}),
        &Schema::for_kind("Job"),
    )
    .unwrap();
    assert_eq!(
        got["metadata"]["finalizers"],
        json!(["example.com/x", "batch.kubernetes.io/job-tracking"])
    );
    let got = apply(
        &got,
        &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["batch.kubernetes.io/job-tracking"]}}),
        &Schema::for_kind("Job"),
    )
    .unwrap();
    assert_eq!(got["metadata"]["finalizers"], json!(["example.com/x"]));
}

#[test]
fn owner_references_merge_by_uid() {
    let pod = json!({"metadata": {"name": "p", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "u1", "controller": true}
    ]}});
    let got = apply(
        &pod,
        &json!({"metadata": {"ownerReferences": [
            {"uid": "u1", "blockOwnerDeletion": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u2"}
        ]}}),
        &Schema::for_kind("Pod"),
    )
    .unwrap();
    assert_eq!(
        got["metadata"]["ownerReferences"],
        json!([
            {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "u1", "controller": true,
             "blockOwnerDeletion": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u2"}
        ])
    );
}

#[test]
fn pod_lists_use_upstream_merge_keys() {
    let pod = json!({"spec": {
        "containers": [{
            "name": "c",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "args": ["a", "b"]
        }],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "imagePullSecrets": [{"name": "s1"}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}]
    }});
    let patch = json!({"spec": {
        "containers": [{
            "name": "c",
            "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
            "args": ["c"]
        }],
        "volumes": [{"name": "cfg", "configMap": {"name": "cm"}}],
        "tolerations": [{"key": "other", "operator": "Exists"}],
        "imagePullSecrets": [{"name": "s2"}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}]
    }});
    let got = apply(&pod, &patch, &Schema::for_kind("Pod")).unwrap();
    assert_eq!(
        got,
        json!({"spec": {
            "containers": [{
                "name": "c",
                "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
                "args": ["c"]
            }],
            // Without `$setElementOrder`, elements the server did not have come first, as
            // upstream orders them.
            "volumes": [{"name": "cfg", "configMap": {"name": "cm"}}, {"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "other", "operator": "Exists"}],
            "imagePullSecrets": [{"name": "s2"}, {"name": "s1"}],
            // hostnames is atomic inside the merged element.
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}]
        }})
    );
}

#[test]
fn cronjob_template_containers_merge() {
    let cj = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]
    }}}}}});
    let got = apply(
        &cj,
        &json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "b", "image": "z"}]
        }}}}}}),
        &Schema::for_kind("CronJob"),
    )
    .unwrap();
    assert_eq!(
        got["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}])
    );
}

#[test]
fn node_and_namespace_lists() {
    let node = json!({"spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}],
                   "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}]}});
    let got = apply(
        &node,
        &json!({"spec": {"podCIDRs": ["fd00::/64"], "taints": []},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "addresses": [{"type": "Hostname", "address": "n1"}]}}),
        &Schema::for_kind("Node"),
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"spec": {"podCIDRs": ["fd00::/64", "10.0.0.0/24"], "taints": []},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "Hostname", "address": "n1"},
                                     {"type": "InternalIP", "address": "10.1.1.1"}]}})
    );
    let ns = json!({"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
    let got = apply(
        &ns,
        &json!({"spec": {"finalizers": ["other"]}}),
        &Schema::for_kind("Namespace"),
    )
    .unwrap();
    // NamespaceSpec.finalizers is atomic, unlike metadata.finalizers.
    assert_eq!(got["spec"]["finalizers"], json!(["other"]));
}

#[test]
fn unknown_kind_is_schemaless() {
    let got = apply(
        &json!({"spec": {"containers": [{"name": "a"}]}}),
        &json!({"spec": {"containers": [{"name": "b"}]}}),
        &Schema::for_kind("Widget"),
    )
    .unwrap();
    assert_eq!(got, json!({"spec": {"containers": [{"name": "b"}]}}));
}

#[test]
fn original_is_not_modified() {
    let job = realistic_job();
    let before = job.clone();
    let _ = apply(
        &job,
        &json!({"metadata": {"labels": null}}),
        &Schema::for_kind("Job"),
    );
    assert_eq!(job, before);
}

// ---------------------------------------------------------------------------------------------
// Robustness: random documents never panic

/// A small xorshift generator: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const KEYS: &[&str] = &[
    "metadata",
    "spec",
    "status",
    "template",
    "containers",
    "initContainers",
    "env",
    "ports",
    "name",
    "value",
    "image",
    "command",
    "labels",
    "finalizers",
    "ownerReferences",
    "uid",
    "conditions",
    "type",
    "containerPort",
    "volumes",
    "volumeMounts",
    "mountPath",
    "mergingList",
    "mergingIntList",
    "nonMergingList",
    "simpleMap",
    "retainKeysMap",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/env",
    "$setElementOrder/mergingList",
    "$setElementOrder/mergingIntList",
    "$setElementOrder/finalizers",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/mergingIntList",
    "$deleteFromPrimitiveList/command",
    "$setElementOrder",
    "$deleteFromPrimitiveList",
    "$setElementOrderX/y",
    "jobTemplate",
    "podCIDRs",
    "addresses",
];

const STRINGS: &[&str] = &[
    "a", "b", "c", "delete", "replace", "merge", "name", "value", "A", "B", "x", "",
];

fn random_value(rng: &mut Rng, depth: u32) -> Value {
    let choice = if depth == 0 {
        rng.below(5)
    } else {
        rng.below(9)
    };
    match choice {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(4)),
        3 => json!(rng.pick(STRINGS)),
        4 => json!(0.5 * rng.below(3) as f64),
        5..=6 => {
            let n = rng.below(4);
            let mut m = Map::new();
            for _ in 0..n {
                let k = rng.pick(KEYS).to_string();
                m.insert(k, random_value(rng, depth - 1));
            }
            Value::Object(m)
        }
        _ => {
            let n = rng.below(4);
            (0..n).map(|_| random_value(rng, depth - 1)).collect()
        }
    }
}

/// Mostly well-formed list elements make the merge paths, not just the error paths, run.
fn random_document(rng: &mut Rng, depth: u32) -> Value {
    let mut v = random_value(rng, depth);
    if !v.is_object() {
        v = json!({});
    }
    if rng.below(2) == 0 {
        v["spec"] = json!({"template": {"spec": {"containers": [
            {"name": rng.pick(STRINGS), "env": [{"name": rng.pick(STRINGS), "value": "1"}]},
            {"name": rng.pick(STRINGS), "$patch": rng.pick(STRINGS)}
        ]}}});
    }
    if rng.below(2) == 0 {
        v["mergingList"] =
            json!([{"name": rng.below(3)}, {"name": rng.below(3), "mergingList": [{"name": 1}]}]);
        v["$setElementOrder/mergingList"] = json!([{"name": rng.below(3)}, {"name": rng.below(3)}]);
    }
    v
}

#[test]
fn random_patches_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let schemas = [
        Schema::for_kind("Job"),
        Schema::for_kind("Pod"),
        Schema::for_kind("CronJob"),
        Schema::for_kind("Node"),
        merge_item(),
        Schema::schemaless(),
    ];
    let mut ok = 0;
    for i in 0..5000 {
        let original = random_document(&mut rng, 4);
        let patch = random_document(&mut rng, 4);
        let schema = &schemas[i % schemas.len()];
        if let Ok(v) = apply(&original, &patch, schema) {
            ok += 1;
            assert!(v.is_object());
        }
    }
    // The generator must exercise the success paths too.
    assert!(ok > 1000, "only {ok} patches applied");
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let mut patch = json!({});
    for _ in 0..(MAX_DEPTH + 10) {
        patch = json!({"simpleMap": patch});
    }
    // A 2 MiB stack, as tokio's worker threads have, must be enough even in debug builds.
    let r = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || apply(&json!({}), &patch, &Schema::schemaless()))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(r, Err(SmpError::TooDeep));
}

// ---------------------------------------------------------------------------------------------
// Upstream's three-way scenarios: the patch kubectl computes, applied to the live object.

#[test]
fn upstream_three_way_scenarios() {
    let cases: Vec<(&str, Value, Value, Value)> = vec![
        (
            "add field to map in merging list nested in merging list with value conflict",
            json!({"mergingList": [
                {"name": 1, "other": "a", "mergingList": [
                    {"name": 1, "value": "a", "other": "c"},
                    {"name": 2, "value": "b", "other": "d"}]},
                {"name": 2, "other": "b"}]}),
            json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                    "name": 1,
                    "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]}]}),
            json!({"mergingList": [
                {"name": 1, "other": "a", "mergingList": [
                    {"name": 1, "value": 1, "other": "c"},
                    {"name": 2, "value": 2, "other": "d"}]},
                {"name": 2, "other": "b"}]}),
        ),
        (
            "add field to map in merging list nested in merging list with deletion conflict",
            json!({"mergingList": [
                {"name": 1, "other": "a", "mergingList": [{"name": 2, "value": 2, "other": "d"}]},
                {"name": 2, "other": "b"}]}),
            json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}],
                    "name": 1, "mergingList": [{"name": 1, "value": 1}]}]}),
            json!({"mergingList": [
                {"name": 1, "other": "a", "mergingList": [
                    {"name": 2, "value": 2, "other": "d"}, {"name": 1, "value": 1}]},
                {"name": 2, "other": "b"}]}),
        ),
        (
            "add map to merging list by pointer",
            json!({"mergeItemPtr": [{"name": 1, "other": "a"}, {"name": 3}]}),
            json!({"$setElementOrder/mergeItemPtr": [{"name": 1}, {"name": 2}],
                "mergeItemPtr": [{"name": 2}]}),
            json!({"mergeItemPtr": [{"name": 1, "other": "a"}, {"name": 2}, {"name": 3}]}),
        ),
        (
            "add map to merging list by pointer with conflict",
            json!({"mergeItemPtr": [{"name": 3}]}),
            json!({"$setElementOrder/mergeItemPtr": [{"name": 1}, {"name": 2}],
                "mergeItemPtr": [{"name": 1}, {"name": 2}]}),
            json!({"mergeItemPtr": [{"name": 1}, {"name": 2}, {"name": 3}]}),
        ),
        (
            "merge lists of scalars",
            json!({"mergingIntList": [1, 2, 4]}),
            json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3]}),
            json!({"mergingIntList": [1, 2, 3, 4]}),
        ),
        (
            "add an item in a list of primitives and preserve order",
            json!({"mergingIntList": [1, 4, 2]}),
            json!({"$setElementOrder/mergingIntList": [3, 1, 2], "mergingIntList": [3]}),
            json!({"mergingIntList": [3, 1, 4, 2]}),
        ),
        (
            "delete an item in a list of primitives and preserve order",
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"$setElementOrder/mergingIntList": [2, 1],
                "$deleteFromPrimitiveList/mergingIntList": [3]}),
            json!({"mergingIntList": [2, 1]}),
        ),
        (
            "add and delete an item in a int list and preserve order",
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"$setElementOrder/mergingIntList": [4, 2, 1], "mergingIntList": [4],
                "$deleteFromPrimitiveList/mergingIntList": [3]}),
            json!({"mergingIntList": [4, 2, 1]}),
        ),
        (
            "add an item in a list and preserve order",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
            json!({"$setElementOrder/mergingList": [{"name": 3}, {"name": 1}, {"name": 2}],
                "mergingList": [{"name": 3, "value": 3}]}),
            json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "other": "a"},
                {"name": 2, "value": 2, "other": "b"}]}),
        ),
        (
            "add multiple items in a list and preserve order",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
            json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 4}, {"name": 2}, {"name": 3}],
                "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}]}),
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 4, "value": 4},
                {"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": 3}]}),
        ),
        (
            "delete an item in a list and preserve order",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"},
                {"name": 3, "value": 3}]}),
            json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}],
                "mergingList": [{"name": 3, "$patch": "delete"}]}),
            json!({"mergingList": [{"name": 2, "value": 2, "other": "b"}, {"name": 1, "other": "a"}]}),
        ),
        (
            "change an item in a list and preserve order",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"},
                {"name": 3, "value": 3}]}),
            json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 3}, {"name": 1}],
                "mergingList": [{"name": 3, "value": "x"}]}),
            json!({"mergingList": [{"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": "x"},
                {"name": 1, "other": "a"}]}),
        ),
        (
            "add and delete an item in a list and preserve order",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"},
                {"name": 3, "value": 3}]}),
            json!({"$setElementOrder/mergingList": [{"name": 4}, {"name": 2}, {"name": 1}],
                "mergingList": [{"name": 4, "value": 4}, {"name": 3, "$patch": "delete"}]}),
            json!({"mergingList": [{"name": 4, "value": 4}, {"name": 2, "value": 2, "other": "b"},
                {"name": 1, "other": "a"}]}),
        ),
        (
            "set elements order in a list with server-only items",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 3, "value": 3},
                {"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 9}]}),
            json!({"$setElementOrder/mergingList": [{"name": 4}, {"name": 2}, {"name": 3}, {"name": 1}]}),
            json!({"mergingList": [{"name": 4, "value": 4}, {"name": 2, "value": 2},
                {"name": 3, "value": 3}, {"name": 1, "other": "a"}, {"name": 9}]}),
        ),
        (
            "set elements order in a list with server-only items 2",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2}, {"name": 9},
                {"name": 3, "value": 3}, {"name": 4, "value": 4}]}),
            json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}, {"name": 4}, {"name": 3}]}),
            json!({"mergingList": [{"name": 2, "value": 2}, {"name": 1, "other": "a"}, {"name": 9},
                {"name": 4, "value": 4}, {"name": 3, "value": 3}]}),
        ),
        (
            "set elements order in a list with server-only items 3",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2}, {"name": 7},
                {"name": 9}, {"name": 8}, {"name": 3, "value": 3}, {"name": 4, "value": 4}]}),
            json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}, {"name": 4}, {"name": 3}]}),
            json!({"mergingList": [{"name": 2, "value": 2}, {"name": 1, "other": "a"}, {"name": 7},
                {"name": 9}, {"name": 8}, {"name": 4, "value": 4}, {"name": 3, "value": 3}]}),
        ),
        (
            "set elements order in a int list with server-only items 3",
            json!({"mergingIntList": [1, 2, 7, 9, 8, 3, 4]}),
            json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3]}),
            json!({"mergingIntList": [2, 1, 7, 9, 8, 4, 3]}),
        ),
        (
            "behavior of set element order for a merging list with duplicate",
            json!({"mergingList": [{"name": 1}, {"name": 2, "value": "dup1"}, {"name": 3},
                {"name": 2, "value": "dup2"}, {"name": 4}]}),
            json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}, {"name": 4},
                {"name": 3}, {"name": 2}]}),
            json!({"mergingList": [{"name": 2, "value": "dup1"}, {"name": 2, "value": "dup2"},
                {"name": 1}, {"name": 4}, {"name": 3}]}),
        ),
        (
            "behavior of set element order for a merging int list with duplicate",
            json!({"mergingIntList": [1, 2, 3, 2, 4]}),
            json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3, 2]}),
            json!({"mergingIntList": [2, 2, 1, 4, 3]}),
        ),
        (
            "retainKeys map should clear defaulted field (discriminated union)",
            json!({"retainKeysMap": {"name": "type1", "value": "foo"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "other"], "name": "type2", "other": "bar"}}),
            json!({"retainKeysMap": {"name": "type2", "other": "bar"}}),
        ),
        (
            "retainKeys map adds a field and clears a field",
            json!({"retainKeysMap": {"name": "foo", "other": "a"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "bar"}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        ),
        (
            "retainKeys map deletes a field and clears a field",
            json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "a"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name"], "value": null}}),
            json!({"retainKeysMap": {"name": "foo"}}),
        ),
        (
            "retainKeys map clears a field",
            json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "a"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "value"]}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        ),
        (
            "retainKeys map adds a field in a nested map",
            json!({"retainKeysMap": {"name": "foo", "value": "bar",
                "simpleMap": {"key1": "a", "key3": "c"}}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "simpleMap", "value"],
                "simpleMap": {"key2": "b"}}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar",
                "simpleMap": {"key1": "a", "key3": "c", "key2": "b"}}}),
        ),
        (
            "retainKeys map deletes a field in a nested map",
            json!({"retainKeysMap": {"name": "foo", "value": "bar",
                "simpleMap": {"key1": "a", "key2": "b", "key3": "c"}}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "simpleMap", "value"],
                "simpleMap": {"key2": null}}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar",
                "simpleMap": {"key1": "a", "key3": "c"}}}),
        ),
    ];
    for (name, current, patch, want) in cases {
        let got = apply(&current, &patch, &merge_item())
            .unwrap_or_else(|e| panic!("{name}: patch failed: {e}"));
        assert_eq!(got, want, "{name}\n got: {got}\nwant: {want}");
        assert_lists_in_order(&got, &want, name);
    }
}

/// serde_json compares maps regardless of key order but lists in order; this double-checks
/// that every list came out in the expected order by comparing merge-key sequences too.
fn assert_lists_in_order(got: &Value, want: &Value, name: &str) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, wv) in w {
                if let Some(gv) = g.get(k) {
                    assert_lists_in_order(gv, wv, name);
                }
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            let keys = |l: &Vec<Value>| -> Vec<Value> {
                l.iter()
                    .map(|v| v.get("name").cloned().unwrap_or_else(|| v.clone()))
                    .collect()
            };
            assert_eq!(keys(g), keys(w), "{name}: list order");
        }
        _ => {}
    }
}

#[test]
fn new_elements_go_first_without_set_element_order() {
    // Upstream's interleaving takes a patch element the server lacks before any server-only
    // element; `kubectl apply` avoids surprises by always sending `$setElementOrder`.
    check(
        json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        json!({"mergingList": [{"name": 3}]}),
        json!({"mergingList": [{"name": 3}, {"name": 1}, {"name": 2}]}),
    );
    check(
        json!({"mergingIntList": [1, 2]}),
        json!({"mergingIntList": [3]}),
        json!({"mergingIntList": [3, 1, 2]}),
    );
}

#[test]
fn upstream_more_scenarios() {
    let cases: Vec<(&str, Value, Value, Value)> = vec![
        (
            "retainKeys list of maps adds a field and clear a field",
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "other": "x"}]}),
            json!({"$setElementOrder/retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}],
                "retainKeysMergingList": [{"$retainKeys": ["name", "value"], "name": "foo", "value": "a"}]}),
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
        ),
        (
            "retainKeys list of maps deletes a field and clear a field",
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a", "other": "x"}]}),
            json!({"$setElementOrder/retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}],
                "retainKeysMergingList": [{"$retainKeys": ["name"], "name": "foo", "value": null}]}),
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}]}),
        ),
        (
            "delete and reorder in one list, reorder in another",
            json!({"mergingList": [{"name": "a", "value": "a"}, {"name": "b", "value": "b"}],
                "mergeItemPtr": [{"name": "c", "value": "c"}, {"name": "d", "value": "d"}]}),
            json!({"$setElementOrder/mergingList": [{"name": "b"}],
                "$setElementOrder/mergeItemPtr": [{"name": "d"}, {"name": "c"}],
                "mergingList": [{"$patch": "delete", "name": "a"}]}),
            json!({"mergingList": [{"name": "b", "value": "b"}],
                "mergeItemPtr": [{"name": "d", "value": "d"}, {"name": "c", "value": "c"}]}),
        ),
        (
            "replace RawExtension field and merge list",
            json!({"name": "my-object", "mergingList": [{"name": 1}, {"name": 3}],
                "replacingItem": {"Some": "Generic", "Yaml": "Inside", "Field": "Period"}}),
            json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"name": 2}],
                "replacingItem": {"Newly": "Modified", "Yaml": "Inside"}}),
            json!({"name": "my-object", "mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
                "replacingItem": {"Newly": "Modified", "Yaml": "Inside"}}),
        ),
        (
            "number precision survives",
            json!({"int64": 9223372036854775807_i64, "float64": 1.7976931348623157e308}),
            json!({"name": "newname"}),
            json!({"int64": 9223372036854775807_i64, "float64": 1.7976931348623157e308,
                "name": "newname"}),
        ),
    ];
    for (name, current, patch, want) in cases {
        let got = apply(&current, &patch, &merge_item())
            .unwrap_or_else(|e| panic!("{name}: patch failed: {e}"));
        assert_eq!(got, want, "{name}\n got: {got}\nwant: {want}");
        assert_lists_in_order(&got, &want, name);
    }
}

#[test]
fn merge_key_values_compare_like_json_values() {
    // 1 and 1.0 are different keys (Go decodes them as int64 and float64); map-valued keys
    // match regardless of member order.
    check(
        json!({"mergingList": [{"name": 1, "value": "int"}]}),
        json!({"mergingList": [{"name": 1.0, "value": "float"}]}),
        json!({"mergingList": [{"name": 1.0, "value": "float"}, {"name": 1, "value": "int"}]}),
    );
    check(
        json!({"mergingList": [{"name": {"a": 1, "b": 2}, "value": "x"}]}),
        json!({"mergingList": [{"name": {"b": 2, "a": 1}, "other": "y"}]}),
        json!({"mergingList": [{"name": {"a": 1, "b": 2}, "value": "x", "other": "y"}]}),
    );
}

#[test]
fn large_lists_merge_in_reasonable_time() {
    // Hash lookups keep big lists near-linear; nested scans would take minutes here.
    let n = 20_000;
    let current: Vec<Value> = (0..n).map(|i| json!({"name": i, "value": "a"})).collect();
    let patch: Vec<Value> = (0..n)
        .map(|i| {
            if i % 3 == 0 {
                json!({"name": i, "$patch": "delete"})
            } else {
                json!({"name": i + n, "value": "b"})
            }
        })
        .collect();
    let order: Vec<Value> = (0..2 * n).map(|i| json!({"name": i})).collect();
    let start = std::time::Instant::now();
    let got = smp(
        json!({"mergingList": current, "mergingIntList": (0..n).collect::<Vec<_>>()}),
        json!({
            "mergingList": patch,
            "$setElementOrder/mergingList": order,
            "mergingIntList": (n..2 * n).collect::<Vec<_>>(),
            "$deleteFromPrimitiveList/mergingIntList": (0..n).step_by(2).collect::<Vec<_>>()
        }),
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    let list = got["mergingList"].as_array().unwrap();
    assert_eq!(
        list.len(),
        n as usize - (n as usize).div_ceil(3) + (n as usize - (n as usize).div_ceil(3))
    );
    assert_eq!(
        got["mergingIntList"].as_array().unwrap().len(),
        (n + n / 2) as usize
    );
}

#[test]
fn deepest_parsable_patch_applies_on_a_small_stack() {
    // serde_json refuses more than 128 levels; the deepest document it accepts, alternating
    // maps and merging lists, must merge on a 2 MiB stack.
    let mut text = String::from("1");
    for i in 0..42 {
        text = format!("{{\"mergingList\":[{{\"name\":{i},\"simpleMap\":{text}}}]}}");
    }
    let patch: Value = serde_json::from_str(&text).unwrap();
    let original = patch.clone();
    let r = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || apply(&original, &patch, &merge_item()).map(|_| ()))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(r, Ok(()));
}

/// `kubectl apply` after adding an env var and a sidecar container to the manifest.
#[test]
fn kubectl_apply_added_env_and_container() {
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "pi"}, {"name": "sidecar"}],
        "containers": [
            {"$setElementOrder/env": [{"name": "A"}, {"name": "C"}, {"name": "B"}],
             "env": [{"name": "C", "value": "3"}], "name": "pi"},
            {"image": "busybox", "name": "sidecar"}
        ]
    }}}});
    let got = apply(&realistic_job(), &patch, &Schema::for_kind("Job")).unwrap();
    let containers = &got["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers[0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}, {"name": "B", "value": "2"}])
    );
    assert_eq!(
        containers[1],
        json!({"image": "busybox", "name": "sidecar"})
    );
    assert_eq!(containers.as_array().unwrap().len(), 2);
    assert_eq!(containers[0]["image"], json!("perl:5.34.0"));
}

#[test]
fn replace_directive_on_served_list() {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"$patch": "replace"}, {"name": "only", "image": "busybox"}
    ]}}}});
    let got = apply(&realistic_job(), &patch, &Schema::for_kind("Job")).unwrap();
    assert_eq!(
        got["spec"]["template"]["spec"]["containers"],
        json!([{"name": "only", "image": "busybox"}])
    );
}

#[test]
fn pod_status_lists_merge() {
    let pod = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
        "podIPs": [{"ip": "10.0.0.5"}],
        "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0}]
    }});
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "podIPs": [{"ip": "fd00::5"}],
        "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0}]
    }});
    let got = apply(&pod, &patch, &Schema::for_kind("Pod")).unwrap();
    assert_eq!(
        got,
        json!({"status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "podIPs": [{"ip": "fd00::5"}, {"ip": "10.0.0.5"}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0}]
        }})
    );
}

#[test]
fn metadata_merges_on_every_kind() {
    for kind in [
        "Job",
        "CronJob",
        "Pod",
        "Namespace",
        "Node",
        "Event",
        "Lease",
    ] {
        let got = apply(
            &json!({"metadata": {"name": "x", "finalizers": ["a"], "labels": {"k": "v"}}}),
            &json!({"metadata": {"finalizers": ["b"], "labels": {"k": null}}}),
            &Schema::for_kind(kind),
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"metadata": {"name": "x", "finalizers": ["b", "a"], "labels": {}}}),
            "{kind}"
        );
    }
}
