//! Whether a pod fits on the executor's one node, decided as kube-scheduler's default plugins
//! decide it, and the message the scheduler writes (in the `FailedScheduling` event and the
//! pod's `PodScheduled` condition, reason `Unschedulable`) when it does not.
//!
//! Upstream runs the PreFilter plugins once, then the Filter plugins on each node in profile
//! order, stopping at the first that rejects the node (`RunFilterPlugins`); with no node left
//! it runs the PostFilter plugins (DynamicResources, then DefaultPreemption), whose words end
//! the message. For kbatch's one node that is NodeAffinity's PreFilter (the node names its
//! `matchFields` allow), then NodeUnschedulable, NodeName, TaintToleration, NodeAffinity and
//! NodeResourcesFit. Not modelled: NodePorts, the volume plugins, PodTopologySpread,
//! InterPodAffinity, and DynamicResources' own filtering (resource claims).

use std::collections::{BTreeMap, BTreeSet};

use kbatch_api::k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kbatch_api::quantity;

/// The condition reason (and the event's reason and action) for a pod that does not fit.
pub const UNSCHEDULABLE: &str = "Unschedulable";
pub const FAILED_SCHEDULING: &str = "FailedScheduling";
pub const SCHEDULING_ACTION: &str = "Scheduling";
/// The `PodScheduled` condition of a pod with scheduling gates, as the API server writes it.
pub const SCHEDULING_GATED: &str = kbatch_api::keys::REASON_SCHEDULING_GATED;
pub const SCHEDULING_GATED_MESSAGE: &str = kbatch_api::keys::MESSAGE_SCHEDULING_GATED;

/// The plugins, as upstream names them.
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
pub const NODE_NAME: &str = "NodeName";
pub const TAINT_TOLERATION: &str = "TaintToleration";
pub const NODE_AFFINITY: &str = "NodeAffinity";
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";

/// The plugins' reasons, worded as upstream's.
pub const REASON_NODE_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const REASON_NODE_NAME: &str = "node(s) didn't match the requested node name";
pub const REASON_UNTOLERATED_TAINT: &str = "node(s) had untolerated taint(s)";
pub const REASON_NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const REASON_AFFINITY_CONFLICT: &str = "pod affinity terms conflict";
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// kbatch has one node; the message counts nodes as upstream's does.
const NODES: usize = 1;
/// The toleration that lets a pod onto a cordoned node (`node.kubernetes.io/unschedulable`).
const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// Events carry at most this many bytes of message (`validation.NoteLengthLimit`).
const EVENT_MESSAGE_LIMIT: usize = 1024;
const NANOS_PER_UNIT: i128 = 1_000_000_000;
const NANOS_PER_MILLI: i128 = 1_000_000;

/// What a pod requests, or what a node's pods request together, in the units the scheduler
/// compares: CPU in millicores, everything else in whole units (both rounded up, as
/// `MilliValue` and `Value` round), scalar resources (extended, hugepages, `kubernetes.io/`
/// prefixed, attachable volumes) by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Requests {
    /// Adds another pod's requests (a pod joining the node).
    pub fn add(&mut self, other: &Requests) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        for (name, v) in &other.scalar {
            let e = self.scalar.entry(name.clone()).or_default();
            *e = e.saturating_add(*v);
        }
    }

    /// Takes another pod's requests away (a pod leaving the node).
    pub fn sub(&mut self, other: &Requests) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        for (name, v) in &other.scalar {
            let e = self.scalar.entry(name.clone()).or_default();
            *e = e.saturating_sub(*v);
        }
    }

    /// Nothing requested at all.
    pub fn is_empty(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }

    fn scalar(&self, name: &str) -> i64 {
        self.scalar.get(name).copied().unwrap_or(0)
    }
}

/// The node and what is already on it: the requests of its non-terminal pods (those being
/// bound included) and how many there are.
#[derive(Debug, Clone, Copy)]
pub struct NodeInfo<'a> {
    pub node: &'a Node,
    pub requested: &'a Requests,
    pub pod_count: usize,
}

/// Upstream's status codes for a rejection: whether removing other pods could help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Preemption might help (`Unschedulable`).
    Unschedulable,
    /// Preemption cannot help (`UnschedulableAndUnresolvable`).
    UnschedulableAndUnresolvable,
}

/// Where the scheduling cycle stopped, which decides how the message words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A PreFilter plugin rejected the pod before any node was looked at: its message stands
    /// alone, without a node count.
    PreFilter,
    /// The node was rejected: by a Filter plugin, or left out by a PreFilter plugin's node
    /// list. Its reasons are counted per node.
    Node,
}

/// Why the pod does not fit: the rejecting plugin's reasons and code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub plugin: &'static str,
    pub stage: Stage,
    pub code: Code,
    pub reasons: Vec<String>,
}

impl Unfit {
    fn on_node(plugin: &'static str, code: Code, reason: &str) -> Unfit {
        Unfit {
            plugin,
            stage: Stage::Node,
            code,
            reasons: vec![reason.to_string()],
        }
    }
}

/// One resource the node lacks for the pod (upstream's `InsufficientResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    pub resource: String,
    pub reason: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
    /// The pod asks for more than the node has at all, so removing pods cannot help.
    pub unresolvable: bool,
}

/// Whether the pod's scheduling gates keep the scheduler from trying it.
pub fn scheduling_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// The pod's effective request, as upstream's `PodRequests` computes it for the scheduler:
/// regular containers and restartable (sidecar) init containers run together and add up; each
/// regular init container runs alone beside the sidecars started before it, and the pod needs
/// the largest of those phases; pod-level requests (`spec.resources`, PodLevelResources is on
/// by default) replace the containers' for cpu, memory and hugepages; the overhead comes on
/// top. Sums are exact (to the nanounit) and rounded up once at the end, as upstream rounds
/// the summed quantity; unparseable quantities count as nothing.
pub fn pod_requests(pod: &Pod) -> Requests {
    let Some(spec) = pod.spec.as_ref() else {
        return Requests::default();
    };
    let mut reqs = ResourceList::new();
    for c in &spec.containers {
        add_list(&mut reqs, &container_requests(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_requests(c);
        let phase = if c.restart_policy.as_deref() == Some("Always") {
            add_list(&mut reqs, &own);
            add_list(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut phase = own;
            add_list(&mut phase, &sidecars);
            phase
        };
        max_list(&mut init_peak, &phase);
    }
    max_list(&mut reqs, &init_peak);
    let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    for (name, q) in pod_level.into_iter().flatten() {
        if is_supported_pod_level_resource(name)
            && let Some(n) = nanos(q)
        {
            reqs.insert(name.clone(), n);
        }
    }
    add_list(&mut reqs, &to_list(spec.overhead.as_ref()));

    // Upstream's `SetMaxResource` on an empty Resource: never below zero.
    let mut r = Requests::default();
    for (name, n) in &reqs {
        match name.as_str() {
            "cpu" => r.milli_cpu = to_milli(*n).max(0),
            "memory" => r.memory = to_units(*n).max(0),
            "ephemeral-storage" => r.ephemeral_storage = to_units(*n).max(0),
            _ if is_scalar_resource_name(name) => {
                r.scalar.insert(name.clone(), to_units(*n).max(0));
            }
            _ => {}
        }
    }
    r
}

/// The resources the node lacks for the pod, in upstream's order (pods, cpu, memory,
/// ephemeral-storage, then scalar resources): NodeResourcesFit's `Fits` with the default
/// arguments (no ignored resources). A resource the pod requests and the node does not
/// list has capacity 0.
pub fn insufficient_resources(pod: &Pod, node: &NodeInfo) -> Vec<InsufficientResource> {
    let request = pod_requests(pod);
    let alloc = Allocatable::of(node.node);
    let used = node.requested;
    let mut out = Vec::new();
    let pod_count = i64::try_from(node.pod_count).unwrap_or(i64::MAX);
    if pod_count.saturating_add(1) > alloc.pods {
        out.push(InsufficientResource {
            resource: "pods".to_string(),
            reason: REASON_TOO_MANY_PODS.to_string(),
            requested: 1,
            used: pod_count,
            capacity: alloc.pods,
            unresolvable: false,
        });
    }
    let fixed = [
        (
            "cpu",
            request.milli_cpu,
            used.milli_cpu,
            alloc.requests.milli_cpu,
        ),
        ("memory", request.memory, used.memory, alloc.requests.memory),
        (
            "ephemeral-storage",
            request.ephemeral_storage,
            used.ephemeral_storage,
            alloc.requests.ephemeral_storage,
        ),
    ];
    let scalar = request.scalar.iter().map(|(name, v)| {
        (
            name.as_str(),
            *v,
            used.scalar(name),
            alloc.requests.scalar(name),
        )
    });
    for (name, requested, used, capacity) in fixed.into_iter().chain(scalar) {
        // A resource the pod does not ask for is never checked.
        if requested <= 0 {
            continue;
        }
        let free = i128::from(capacity) - i128::from(used);
        if i128::from(requested) > free {
            out.push(InsufficientResource {
                resource: name.to_string(),
                reason: format!("Insufficient {name}"),
                requested,
                used,
                capacity,
                unresolvable: requested > capacity,
            });
        }
    }
    out
}

/// Whether the pod fits on the node: the default profile's PreFilter and Filter plugins in
/// order, the first rejection reported (upstream stops at it).
pub fn filter(pod: &Pod, node: &NodeInfo) -> Result<(), Unfit> {
    let node_name = node.node.metadata.name.as_deref().unwrap_or("");
    match node_affinity_pre_filter(pod) {
        PreFilterNodes::All => {}
        PreFilterNodes::Conflict => {
            return Err(Unfit {
                plugin: NODE_AFFINITY,
                stage: Stage::PreFilter,
                code: Code::UnschedulableAndUnresolvable,
                reasons: vec![REASON_AFFINITY_CONFLICT.to_string()],
            });
        }
        // A node left out by a PreFilter result is not filtered at all; schedule_one gives
        // it this status (`sets.List` of the plugins that narrowed the nodes).
        PreFilterNodes::Only(names) if !names.contains(node_name) => {
            let reason = format!("node(s) didn't satisfy plugin(s) [{NODE_AFFINITY}]");
            return Err(Unfit::on_node(
                NODE_AFFINITY,
                Code::UnschedulableAndUnresolvable,
                &reason,
            ));
        }
        PreFilterNodes::Only(_) => {}
    }
    node_unschedulable_filter(pod, node.node)?;
    node_name_filter(pod, node_name)?;
    taint_toleration_filter(pod, node.node)?;
    node_affinity_filter(pod, node.node)?;
    node_resources_fit_filter(pod, node)
}

/// The scheduler's whole message for a pod that does not fit (upstream's `FitError.Error`
/// with the PostFilter plugins' message), the `PodScheduled` condition's message; the event
/// carries it through `event_message`.
///
/// `0/1 nodes are available:` then a PreFilter rejection's message, or the node's reasons
/// each counted (`1 <reason>`), sorted and joined with `, `, then `.`; then, after a space,
/// the PostFilter message: DynamicResources' `no new claims to deallocate` and
/// DefaultPreemption's `preemption: …` joined with `, `. A pod with `preemptionPolicy: Never`
/// is `not eligible due to preemptionPolicy=Never.`; an unresolvable rejection leaves no
/// candidate (`Preemption is not helpful for scheduling`); otherwise the node's pods are
/// reported as no victims (`No preemption victims found for incoming pod`), as upstream says
/// when no lower-priority pods would make room (a preemption that found victims adds
/// nothing: `PostFilter::Nominated`). A
/// PreFilter rejection stops the cycle before DynamicResources' PreFilter writes its state, so
/// its PostFilter fails with the cycle state's `not found`, which upstream prints as is.
pub fn fit_error_message(pod: &Pod, unfit: &Unfit) -> String {
    fit_error_message_with(pod, unfit, PostFilter::NoVictims)
}

/// What preemption (the PostFilter) made of a pod that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostFilter {
    /// Nothing to preempt (or not allowed to): the usual message.
    NoVictims,
    /// Not eligible, for this reason (`PodEligibleToPreemptOthers`).
    NotEligible(&'static str),
    /// Victims were chosen and the pod nominated: the PostFilter succeeded, and adds nothing.
    Nominated,
}

/// `fit_error_message` with preemption's outcome.
pub fn fit_error_message_with(pod: &Pod, unfit: &Unfit, post: PostFilter) -> String {
    let mut message = match unfit.stage {
        Stage::PreFilter => format!(
            "0/{NODES} nodes are available: {}.",
            unfit.reasons.join(", ")
        ),
        Stage::Node => nodes_available(&unfit.reasons),
    };
    match post {
        PostFilter::Nominated => {}
        PostFilter::NotEligible(why) => {
            message.push_str(" no new claims to deallocate, preemption: ");
            message.push_str(why);
        }
        PostFilter::NoVictims => {
            message.push(' ');
            message.push_str(&post_filter_message(pod, unfit));
        }
    }
    message
}

/// The event's message: the condition's, cut to the event limit with ` ...` as the scheduler
/// cuts it (`truncateMessage`), at a character boundary.
pub fn event_message(message: &str) -> String {
    const SUFFIX: &str = " ...";
    if message.len() <= EVENT_MESSAGE_LIMIT {
        return message.to_string();
    }
    let mut end = EVENT_MESSAGE_LIMIT - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &message[..end])
}

/// `0/1 nodes are available: <count> <reason>, ….`: reasons counted across nodes, the
/// `<count> <reason>` strings sorted bytewise (Go's `sort.Strings`).
fn nodes_available(reasons: &[String]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r.as_str()).or_default() += 1;
    }
    let mut histogram: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    histogram.sort();
    let mut message = format!("0/{NODES} nodes are available:");
    if !histogram.is_empty() {
        message.push(' ');
        message.push_str(&histogram.join(", "));
        message.push('.');
    }
    message
}

fn post_filter_message(pod: &Pod, unfit: &Unfit) -> String {
    if unfit.stage == Stage::PreFilter && unfit.code == Code::UnschedulableAndUnresolvable {
        return "not found".to_string();
    }
    let never = pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        == Some("Never");
    let preemption = if never {
        "not eligible due to preemptionPolicy=Never.".to_string()
    } else if unfit.code == Code::UnschedulableAndUnresolvable {
        nodes_available(&["Preemption is not helpful for scheduling".to_string()])
    } else {
        nodes_available(&["No preemption victims found for incoming pod".to_string()])
    };
    format!("no new claims to deallocate, preemption: {preemption}")
}

/// NodeUnschedulable: a cordoned node takes only pods tolerating its unschedulable taint.
fn node_unschedulable_filter(pod: &Pod, node: &Node) -> Result<(), Unfit> {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if !cordoned {
        return Ok(());
    }
    let taint = Taint {
        key: UNSCHEDULABLE_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Taint::default()
    };
    if tolerations(pod).iter().any(|t| tolerates(t, &taint)) {
        return Ok(());
    }
    Err(Unfit::on_node(
        NODE_UNSCHEDULABLE,
        Code::UnschedulableAndUnresolvable,
        REASON_NODE_UNSCHEDULABLE,
    ))
}

/// NodeName: a pod naming another node does not go on this one.
fn node_name_filter(pod: &Pod, node_name: &str) -> Result<(), Unfit> {
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(wanted) if !wanted.is_empty() && wanted != node_name => Err(Unfit::on_node(
            NODE_NAME,
            Code::UnschedulableAndUnresolvable,
            REASON_NODE_NAME,
        )),
        _ => Ok(()),
    }
}

/// TaintToleration: every NoSchedule and NoExecute taint must be tolerated.
fn taint_toleration_filter(pod: &Pod, node: &Node) -> Result<(), Unfit> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[]);
    let tolerations = tolerations(pod);
    let untolerated = taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    if untolerated {
        return Err(Unfit::on_node(
            TAINT_TOLERATION,
            Code::UnschedulableAndUnresolvable,
            REASON_UNTOLERATED_TAINT,
        ));
    }
    Ok(())
}

pub(crate) fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

pub(crate) use kbatch_api::taints::tolerates;

/// The node names NodeAffinity's PreFilter allows.
enum PreFilterNodes<'p> {
    All,
    Only(BTreeSet<&'p str>),
    /// Every term names a node and no term's names agree.
    Conflict,
}

/// NodeAffinity's PreFilter: when every required term has `metadata.name In` field
/// requirements, only the nodes they name (intersected within a term, united across
/// terms) are filtered.
fn node_affinity_pre_filter(pod: &Pod) -> PreFilterNodes<'_> {
    let Some(required) = required_node_selector(pod) else {
        return PreFilterNodes::All;
    };
    if required.node_selector_terms.is_empty() {
        return PreFilterNodes::All;
    }
    let mut names = BTreeSet::new();
    for term in &required.node_selector_terms {
        let mut term_names: Option<BTreeSet<&str>> = None;
        for r in term.match_fields.iter().flatten() {
            if r.key == "metadata.name" && r.operator == "In" {
                let these: BTreeSet<&str> = r.values.iter().flatten().map(String::as_str).collect();
                term_names = Some(match term_names {
                    None => these,
                    Some(prev) => prev.intersection(&these).copied().collect(),
                });
            }
        }
        // A term without node names allows every node (terms are ORed).
        let Some(term_names) = term_names else {
            return PreFilterNodes::All;
        };
        names.extend(term_names);
    }
    if names.is_empty() {
        PreFilterNodes::Conflict
    } else {
        PreFilterNodes::Only(names)
    }
}

fn required_node_selector(
    pod: &Pod,
) -> Option<&kbatch_api::k8s_openapi::api::core::v1::NodeSelector> {
    pod.spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

/// NodeAffinity's Filter: `spec.nodeSelector` (every label equal) and the required node
/// affinity (terms ORed; a term that does not parse or is empty matches nothing).
fn node_affinity_filter(pod: &Pod, node: &Node) -> Result<(), Unfit> {
    if required_affinity_matches(pod, node) {
        Ok(())
    } else {
        Err(Unfit::on_node(
            NODE_AFFINITY,
            Code::UnschedulableAndUnresolvable,
            REASON_NODE_AFFINITY,
        ))
    }
}

pub(crate) fn required_affinity_matches(pod: &Pod, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
    let selected = selector
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    if !selected {
        return false;
    }
    let Some(required) = required_node_selector(pod) else {
        return true;
    };
    let name = node.metadata.name.as_deref().unwrap_or("");
    required
        .node_selector_terms
        .iter()
        .filter(|t| !is_empty_term(t))
        .any(|t| term_matches(t, labels, name) == Some(true))
}

fn is_empty_term(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && term.match_fields.as_ref().is_none_or(Vec::is_empty)
}

/// One term: all its label and field requirements hold. `None` when it does not parse.
fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> Option<bool> {
    let expressions = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    let expressions: Vec<LabelRequirement> = expressions
        .iter()
        .map(LabelRequirement::parse)
        .collect::<Option<_>>()?;
    let fields: Vec<FieldRequirement> = fields
        .iter()
        .map(FieldRequirement::parse)
        .collect::<Option<_>>()?;
    if !expressions.iter().all(|r| r.matches(labels)) {
        return Some(false);
    }
    // A node without a name has no fields; field requirements are then not checked.
    if !node_name.is_empty() && !fields.iter().all(|r| r.matches(node_name)) {
        return Some(false);
    }
    Some(true)
}

/// A label requirement as `labels.NewRequirement` accepts it.
struct LabelRequirement<'r> {
    key: &'r str,
    op: LabelOp,
    values: &'r [String],
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LabelOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl<'r> LabelRequirement<'r> {
    /// `None` when upstream's parser rejects it: an unknown operator, a key that is not a
    /// qualified name, a value that is not a label value, the wrong number of values, or a
    /// `Gt`/`Lt` value that is not an integer.
    fn parse(r: &'r NodeSelectorRequirement) -> Option<Self> {
        let op = match r.operator.as_str() {
            "In" => LabelOp::In,
            "NotIn" => LabelOp::NotIn,
            "Exists" => LabelOp::Exists,
            "DoesNotExist" => LabelOp::DoesNotExist,
            "Gt" => LabelOp::Gt,
            "Lt" => LabelOp::Lt,
            _ => return None,
        };
        let values = r.values.as_deref().unwrap_or(&[]);
        let counted = match op {
            LabelOp::In | LabelOp::NotIn => !values.is_empty(),
            LabelOp::Exists | LabelOp::DoesNotExist => values.is_empty(),
            LabelOp::Gt | LabelOp::Lt => {
                values.len() == 1 && values.iter().all(|v| v.parse::<i64>().is_ok())
            }
        };
        let valid =
            counted && is_qualified_name(&r.key) && values.iter().all(|v| is_label_value(v));
        valid.then_some(LabelRequirement {
            key: &r.key,
            op,
            values,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(self.key);
        let listed = |v: &String| self.values.contains(v);
        match self.op {
            LabelOp::In => value.is_some_and(listed),
            LabelOp::NotIn => !value.is_some_and(listed),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::Gt | LabelOp::Lt => {
                let (Some(Ok(have)), [want]) = (value.map(|v| v.parse::<i64>()), self.values)
                else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.op == LabelOp::Gt {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

/// A field requirement: `In` or `NotIn` with exactly one value; the node's only field is
/// `metadata.name`, any other reads as empty.
struct FieldRequirement<'r> {
    key: &'r str,
    equal: bool,
    value: &'r str,
}

impl<'r> FieldRequirement<'r> {
    fn parse(r: &'r NodeSelectorRequirement) -> Option<Self> {
        let equal = match r.operator.as_str() {
            "In" => true,
            "NotIn" => false,
            _ => return None,
        };
        match r.values.as_deref() {
            Some([value]) => Some(FieldRequirement {
                key: &r.key,
                equal,
                value,
            }),
            _ => None,
        }
    }

    fn matches(&self, node_name: &str) -> bool {
        let have = if self.key == "metadata.name" {
            node_name
        } else {
            ""
        };
        (have == self.value) == self.equal
    }
}

/// NodeResourcesFit: room for one more pod and for every resource the pod requests;
/// unresolvable when the pod asks for more than the node has at all.
fn node_resources_fit_filter(pod: &Pod, node: &NodeInfo) -> Result<(), Unfit> {
    let insufficient = insufficient_resources(pod, node);
    if insufficient.is_empty() {
        return Ok(());
    }
    let code = if insufficient.iter().any(|r| r.unresolvable) {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    Err(Unfit {
        plugin: NODE_RESOURCES_FIT,
        stage: Stage::Node,
        code,
        reasons: insufficient.into_iter().map(|r| r.reason).collect(),
    })
}

/// What the node offers (`status.allocatable`), each quantity rounded up on its own as
/// upstream's `Resource.Add` does; the pod count from `pods` (0 when absent).
struct Allocatable {
    requests: Requests,
    pods: i64,
}

impl Allocatable {
    fn of(node: &Node) -> Allocatable {
        let mut a = Allocatable {
            requests: Requests::default(),
            pods: 0,
        };
        let listed = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for (name, q) in listed.into_iter().flatten() {
            let Some(n) = nanos(q) else {
                continue;
            };
            let r = &mut a.requests;
            match name.as_str() {
                "cpu" => r.milli_cpu = r.milli_cpu.saturating_add(to_milli(n)),
                "memory" => r.memory = r.memory.saturating_add(to_units(n)),
                "pods" => a.pods = a.pods.saturating_add(to_units(n)),
                "ephemeral-storage" => {
                    r.ephemeral_storage = r.ephemeral_storage.saturating_add(to_units(n));
                }
                _ if is_scalar_resource_name(name) => {
                    let e = r.scalar.entry(name.clone()).or_default();
                    *e = e.saturating_add(to_units(n));
                }
                _ => {}
            }
        }
        a
    }
}

/// Quantities by resource name, in nanounits.
type ResourceList = BTreeMap<String, i128>;

fn container_requests(c: &Container) -> ResourceList {
    to_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
}

fn to_list(list: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    list.into_iter()
        .flatten()
        .filter_map(|(name, q)| Some((name.clone(), nanos(q)?)))
        .collect()
}

/// `addResourceList`: what runs together adds up.
fn add_list(list: &mut ResourceList, more: &ResourceList) {
    for (name, n) in more {
        let e = list.entry(name.clone()).or_default();
        *e = e.saturating_add(*n);
    }
}

/// `maxResourceList`: of phases that run one after the other, the largest counts.
fn max_list(list: &mut ResourceList, other: &ResourceList) {
    for (name, n) in other {
        let e = list.entry(name.clone()).or_insert(*n);
        *e = (*e).max(*n);
    }
}

/// A quantity in nanounits: exact below 9.2 × 10⁹ units; beyond that (where the nanounit
/// count no longer fits an i64) rounded up to a whole unit, far past any real request.
fn nanos(q: &Quantity) -> Option<i128> {
    let exact = quantity::parse_exact(&q.0)?;
    let n = exact.scaled_ceil(-9);
    if n == i64::MAX || n == i64::MIN {
        Some(i128::from(exact.scaled_ceil(0)).saturating_mul(NANOS_PER_UNIT))
    } else {
        Some(i128::from(n))
    }
}

fn to_milli(nanos: i128) -> i64 {
    saturate(div_ceil(nanos, NANOS_PER_MILLI))
}

fn to_units(nanos: i128) -> i64 {
    saturate(div_ceil(nanos, NANOS_PER_UNIT))
}

/// Rounded up, as apimachinery's `ScaledValue` rounds.
fn div_ceil(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 { q + 1 } else { q }
}

fn saturate(n: i128) -> i64 {
    i64::try_from(n).unwrap_or(if n > 0 { i64::MAX } else { i64::MIN })
}

/// Pod-level requests replace the containers' for these (`IsSupportedPodLevelResource`).
fn is_supported_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// The resources the scheduler counts by name (`IsScalarResourceName`): extended resources,
/// hugepages, `kubernetes.io/`-prefixed native ones and attachable volumes.
fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with("hugepages-")
        || is_prefixed_native_resource(name)
        || name.starts_with("attachable-volumes-")
}

fn is_prefixed_native_resource(name: &str) -> bool {
    name.contains("kubernetes.io/")
}

/// A domain-prefixed name outside `kubernetes.io/` that stays a qualified name as a quota
/// name (`requests.<name>`).
fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || is_prefixed_native_resource(name);
    !native && !name.starts_with("requests.") && is_qualified_name(&format!("requests.{name}"))
}

/// `IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`, then a name of at most
/// 63 characters, alphanumeric at both ends, `-`, `_` or `.` between.
fn is_qualified_name(value: &str) -> bool {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if name.contains('/') {
        return false;
    }
    if let Some(prefix) = prefix
        && (prefix.is_empty() || !is_dns1123_subdomain(prefix))
    {
        return false;
    }
    name.len() <= 63 && is_name_part(name)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `IsValidLabelValue`: empty, or a name part of at most 63 characters.
fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= 63 && is_name_part(s))
}

/// `IsDNS1123Subdomain`: at most 253 characters of dot-separated lowercase labels.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(first), Some(last)) => {
                    (first.is_ascii_lowercase() || first.is_ascii_digit())
                        && (last.is_ascii_lowercase() || last.is_ascii_digit())
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn node(value: Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn container(requests: Value) -> Value {
        json!({"name": "c", "resources": {"requests": requests}})
    }

    fn sidecar(requests: Value) -> Value {
        json!({"name": "s", "restartPolicy": "Always", "resources": {"requests": requests}})
    }

    fn requests(milli_cpu: i64, memory: i64) -> Requests {
        Requests {
            milli_cpu,
            memory,
            ..Requests::default()
        }
    }

    /// A resource vector as upstream's fit tests write one (`framework.Resource`).
    #[derive(Clone, Copy, Default)]
    struct U {
        cpu: i64,
        mem: i64,
        eph: i64,
        ext_a: Option<i64>,
        ext_b: Option<i64>,
        k8s_a: Option<i64>,
        k8s_b: Option<i64>,
        huge: Option<i64>,
    }

    fn u(cpu: i64, mem: i64) -> U {
        U {
            cpu,
            mem,
            ..U::default()
        }
    }

    /// `newResourcePod`'s container: every field as a request, `pods` included.
    fn usage_container(u: &U) -> Value {
        let mut r = json!({
            "cpu": format!("{}m", u.cpu),
            "memory": u.mem.to_string(),
            "pods": "0",
            "ephemeral-storage": u.eph.to_string(),
        });
        for (name, v) in [
            ("example.com/aaa", u.ext_a),
            ("example.com/bbb", u.ext_b),
            ("kubernetes.io/something", u.k8s_a),
            ("subdomain.kubernetes.io/something", u.k8s_b),
            ("hugepages-2Mi", u.huge),
        ] {
            if let Some(v) = v {
                r[name] = json!(v.to_string());
            }
        }
        container(r)
    }

    fn usage_pod(containers: &[U], init: &[U]) -> Pod {
        pod(json!({
            "containers": containers.iter().map(usage_container).collect::<Vec<_>>(),
            "initContainers": init.iter().map(usage_container).collect::<Vec<_>>(),
        }))
    }

    /// The node of upstream's `TestEnoughRequests`: 10m cpu, 20 bytes, 32 pods, 5
    /// `example.com/aaa`, 20 bytes of ephemeral storage, 5 `hugepages-2Mi`.
    fn fit_test_node(pods: i64) -> Node {
        node(json!({
            "metadata": {"name": "kbatch-node"},
            "status": {"allocatable": {
                "cpu": "10m", "memory": "20", "pods": pods.to_string(),
                "example.com/aaa": "5", "ephemeral-storage": "20", "hugepages-2Mi": "5",
            }},
        }))
    }

    fn plain_node() -> Node {
        node(json!({
            "metadata": {"name": "kbatch-node"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
    }

    fn check(pod: &Pod, node: &Node) -> Result<(), Unfit> {
        let none = Requests::default();
        filter(
            pod,
            &NodeInfo {
                node,
                requested: &none,
                pod_count: 0,
            },
        )
    }

    fn short(
        resource: &str,
        requested: i64,
        used: i64,
        capacity: i64,
        unresolvable: bool,
    ) -> InsufficientResource {
        InsufficientResource {
            resource: resource.to_string(),
            reason: if resource == "pods" {
                REASON_TOO_MANY_PODS.to_string()
            } else {
                format!("Insufficient {resource}")
            },
            requested,
            used,
            capacity,
            unresolvable,
        }
    }

    #[test]
    fn pod_requests_follow_upstream_pod_requests_table() {
        let cases = [
            (
                "larger init container",
                json!({"initContainers": [container(json!({"cpu": "4"}))],
                       "containers": [container(json!({"cpu": "1"}))]}),
                4000,
            ),
            (
                "larger containers",
                json!({"initContainers": [container(json!({"cpu": "2"}))],
                       "containers": [container(json!({"cpu": "2"})), container(json!({"cpu": "3"}))]}),
                5000,
            ),
            (
                "restartable init container",
                json!({"initContainers": [sidecar(json!({"cpu": "1"}))],
                       "containers": [container(json!({"cpu": "1"}))]}),
                2000,
            ),
            (
                // max(5, restartable init containers (3+2+1) + regular (1)) = 7
                "multiple restartable init containers",
                json!({"initContainers": [
                        container(json!({"cpu": "5"})),
                        sidecar(json!({"cpu": "1"})),
                        sidecar(json!({"cpu": "2"})),
                        sidecar(json!({"cpu": "3"}))],
                       "containers": [container(json!({"cpu": "1"}))]}),
                7000,
            ),
            (
                // init-2 needs 5 beside the sidecars started before it (1+2) = 8; the one
                // started after it does not count.
                "multiple restartable and regular init containers",
                json!({"initContainers": [
                        container(json!({"cpu": "5"})),
                        sidecar(json!({"cpu": "1"})),
                        sidecar(json!({"cpu": "2"})),
                        container(json!({"cpu": "5"})),
                        sidecar(json!({"cpu": "3"}))],
                       "containers": [container(json!({"cpu": "1"}))]}),
                8000,
            ),
            (
                "restartable-init, init and regular",
                json!({"initContainers": [sidecar(json!({"cpu": "10"})), container(json!({"cpu": "200"}))],
                       "containers": [container(json!({"cpu": "100"}))]}),
                210_000,
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(pod_requests(&pod(spec)).milli_cpu, want, "{name}");
        }
    }

    #[test]
    fn pod_requests_add_overhead_after_the_largest_phase() {
        // upstream's "pod overhead included": max(2, 2+3) + 1 cpu, and the overhead's memory.
        let p = pod(json!({
            "overhead": {"cpu": "1", "memory": "1Gi"},
            "initContainers": [container(json!({"cpu": "2"}))],
            "containers": [container(json!({"cpu": "2"})), container(json!({"cpu": "3"}))],
        }));
        assert_eq!(pod_requests(&p), requests(6000, 1 << 30));
        // computePodResourceRequest's example: init 2/1G and 2/3G, containers 2/1G and 1/1G.
        let p = pod(json!({
            "initContainers": [container(json!({"cpu": "2", "memory": "1G"})),
                               container(json!({"cpu": "2", "memory": "3G"}))],
            "containers": [container(json!({"cpu": "2", "memory": "1G"})),
                           container(json!({"cpu": "1", "memory": "1G"}))],
        }));
        assert_eq!(pod_requests(&p), requests(3000, 3_000_000_000));
        // Each resource peaks in its own phase: cpu in the init container, memory in the app.
        let p = pod(json!({
            "overhead": {"cpu": "100m", "memory": "256Mi"},
            "initContainers": [container(json!({"cpu": "1900m", "memory": "1024Mi"}))],
            "containers": [container(json!({"cpu": "1200m", "memory": "1536Mi"})),
                           container(json!({"cpu": "200m", "memory": "256Mi"}))],
        }));
        assert_eq!(pod_requests(&p), requests(2000, 2 << 30));
    }

    #[test]
    fn pod_level_requests_replace_the_containers_for_cpu_memory_and_hugepages() {
        let cases = [
            (
                "init and app containers with pod-level requests",
                json!({"resources": {"requests": {"cpu": "1200m", "memory": "1200Mi"}},
                       "initContainers": [container(json!({"cpu": "500m", "memory": "500Mi"}))],
                       "containers": [container(json!({"cpu": "500m", "memory": "500Mi"}))]}),
                requests(1200, 1200 << 20),
            ),
            (
                "sidecar and app container with pod-level requests",
                json!({"resources": {"requests": {"cpu": "1200m", "memory": "1200Mi"}},
                       "initContainers": [sidecar(json!({"cpu": "500m", "memory": "500Mi"}))],
                       "containers": [container(json!({"cpu": "500m", "memory": "500Mi"}))]}),
                requests(1200, 1200 << 20),
            ),
            (
                "pod-level memory only",
                json!({"resources": {"requests": {"memory": "1200Mi"}},
                       "containers": [{"name": "c"}]}),
                requests(0, 1200 << 20),
            ),
            (
                "containers' ephemeral storage stays beside a pod-level cpu request",
                json!({"resources": {"requests": {"cpu": "500m", "ephemeral-storage": "1Gi"}},
                       "initContainers": [container(json!({"ephemeral-storage": "500Mi"}))],
                       "containers": [container(json!({"ephemeral-storage": "800Mi"}))]}),
                Requests {
                    milli_cpu: 500,
                    ephemeral_storage: 800 << 20,
                    ..Requests::default()
                },
            ),
            (
                "overhead comes on top of the pod-level request",
                json!({"resources": {"requests": {"cpu": "1"}},
                       "overhead": {"cpu": "250m"},
                       "containers": [container(json!({"cpu": "4"}))]}),
                requests(1250, 0),
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(pod_requests(&pod(spec)), want, "{name}");
        }
        let p = pod(json!({
            "resources": {"requests": {"hugepages-2Mi": "4Mi"}},
            "containers": [container(json!({"hugepages-2Mi": "2Mi", "example.com/foo": "1"}))],
        }));
        let r = pod_requests(&p);
        assert_eq!(r.scalar.get("hugepages-2Mi"), Some(&(4 << 20)));
        assert_eq!(r.scalar.get("example.com/foo"), Some(&1));
    }

    #[test]
    fn pod_requests_sum_exactly_then_round_up() {
        // Go adds the quantities and rounds the sum: 0.5m + 0.5m is 1m, not 2m.
        let p = pod(json!({"containers": [
            container(json!({"cpu": "0.5m", "memory": "1.5", "ephemeral-storage": "500m"})),
            container(json!({"cpu": "0.5m", "memory": "1.5", "ephemeral-storage": "500m"})),
        ]}));
        let r = pod_requests(&p);
        assert_eq!((r.milli_cpu, r.memory, r.ephemeral_storage), (1, 3, 1));
        // A lone fraction still rounds up.
        let p = pod(json!({"containers": [container(json!({"cpu": "1n", "memory": "100m"}))]}));
        assert_eq!(pod_requests(&p), requests(1, 1));
        // Large quantities stay exact.
        let p = pod(
            json!({"containers": [container(json!({"memory": "64Ti"})), container(json!({"memory": "1"}))]}),
        );
        assert_eq!(pod_requests(&p).memory, (64_i64 << 40) + 1);
    }

    #[test]
    fn only_scalar_resource_names_are_counted_by_name() {
        let p = pod(json!({"containers": [container(json!({
            "pods": "3",
            "storage": "1Gi",
            "example.com/foo": "2",
            "kubernetes.io/something": "1",
            "hugepages-1Gi": "1Gi",
            "attachable-volumes-aws-ebs": "1",
            "requests.example.com/bar": "1",
            "example.com/Bad_": "1",
            "Example.com/foo": "1",
        }))]}));
        let r = pod_requests(&p);
        let names: Vec<&str> = r.scalar.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "attachable-volumes-aws-ebs",
                "example.com/foo",
                "hugepages-1Gi",
                "kubernetes.io/something"
            ]
        );
    }

    #[test]
    fn requests_add_and_sub() {
        let mut a = requests(100, 10);
        a.scalar.insert("example.com/gpu".into(), 1);
        let mut b = requests(50, 5);
        b.ephemeral_storage = 7;
        b.scalar.insert("example.com/gpu".into(), 2);
        a.add(&b);
        assert_eq!((a.milli_cpu, a.memory, a.ephemeral_storage), (150, 15, 7));
        assert_eq!(a.scalar["example.com/gpu"], 3);
        a.sub(&b);
        assert_eq!((a.milli_cpu, a.memory, a.ephemeral_storage), (100, 10, 0));
        assert_eq!(a.scalar["example.com/gpu"], 1);
        assert!(!a.is_empty());
        assert!(Requests::default().is_empty());
    }

    /// Upstream's `TestEnoughRequests` (default arguments: the rows with ignored resources
    /// are left out), with `Unresolvable` as 1.37 computes it.
    #[test]
    fn enough_requests_table() {
        let ext_a = |cpu, mem, v| U {
            ext_a: Some(v),
            ..u(cpu, mem)
        };
        let huge = |cpu, mem, v| U {
            huge: Some(v),
            ..u(cpu, mem)
        };
        type Row<'a> = (&'a str, Vec<U>, Vec<U>, U, Vec<InsufficientResource>);
        let rows: Vec<Row> = vec![
            (
                "too many resources fails",
                vec![u(1, 1)],
                vec![],
                u(10, 20),
                vec![
                    short("cpu", 1, 10, 10, false),
                    short("memory", 1, 20, 20, false),
                ],
            ),
            (
                "too many resources fails due to init container cpu",
                vec![u(1, 1)],
                vec![u(3, 1)],
                u(8, 19),
                vec![short("cpu", 3, 8, 10, false)],
            ),
            (
                "too many resources fails due to highest init container cpu",
                vec![u(1, 1)],
                vec![u(3, 1), u(2, 1)],
                u(8, 19),
                vec![short("cpu", 3, 8, 10, false)],
            ),
            (
                "too many resources fails due to init container memory",
                vec![u(1, 1)],
                vec![u(1, 3)],
                u(9, 19),
                vec![short("memory", 3, 19, 20, false)],
            ),
            (
                "too many resources fails due to highest init container memory",
                vec![u(1, 1)],
                vec![u(1, 3), u(1, 2)],
                u(9, 19),
                vec![short("memory", 3, 19, 20, false)],
            ),
            (
                "init container fits because it's the max, not sum",
                vec![u(1, 1)],
                vec![u(1, 1)],
                u(9, 19),
                vec![],
            ),
            (
                "multiple init containers fit because it's the max, not sum",
                vec![u(1, 1)],
                vec![u(1, 1), u(1, 1)],
                u(9, 19),
                vec![],
            ),
            ("both resources fit", vec![u(1, 1)], vec![], u(5, 5), vec![]),
            (
                "one resource memory fits",
                vec![u(2, 1)],
                vec![],
                u(9, 5),
                vec![short("cpu", 2, 9, 10, false)],
            ),
            (
                "one resource cpu fits",
                vec![u(1, 2)],
                vec![],
                u(5, 19),
                vec![short("memory", 2, 19, 20, false)],
            ),
            ("equal edge case", vec![u(5, 1)], vec![], u(5, 19), vec![]),
            (
                "equal edge case for init container",
                vec![u(4, 1)],
                vec![u(5, 1)],
                u(5, 19),
                vec![],
            ),
            (
                "extended resource fits",
                vec![ext_a(0, 0, 1)],
                vec![],
                u(0, 0),
                vec![],
            ),
            (
                "extended resource fits for init container",
                vec![u(0, 0)],
                vec![ext_a(0, 0, 1)],
                u(0, 0),
                vec![],
            ),
            (
                "extended resource capacity enforced",
                vec![ext_a(1, 1, 10)],
                vec![],
                ext_a(0, 0, 0),
                vec![short("example.com/aaa", 10, 0, 5, true)],
            ),
            (
                "extended resource capacity enforced for init container",
                vec![u(0, 0)],
                vec![ext_a(1, 1, 10)],
                ext_a(0, 0, 0),
                vec![short("example.com/aaa", 10, 0, 5, true)],
            ),
            (
                "extended resource allocatable enforced",
                vec![ext_a(1, 1, 1)],
                vec![],
                ext_a(0, 0, 5),
                vec![short("example.com/aaa", 1, 5, 5, false)],
            ),
            (
                "extended resource allocatable enforced for init container",
                vec![u(0, 0)],
                vec![ext_a(1, 1, 1)],
                ext_a(0, 0, 5),
                vec![short("example.com/aaa", 1, 5, 5, false)],
            ),
            (
                "extended resource allocatable enforced for multiple containers",
                vec![ext_a(1, 1, 3), ext_a(1, 1, 3)],
                vec![],
                ext_a(0, 0, 2),
                vec![short("example.com/aaa", 6, 2, 5, true)],
            ),
            (
                "extended resource allocatable admits multiple init containers",
                vec![u(0, 0)],
                vec![ext_a(1, 1, 3), ext_a(1, 1, 3)],
                ext_a(0, 0, 2),
                vec![],
            ),
            (
                "extended resource allocatable enforced for multiple init containers",
                vec![u(0, 0)],
                vec![ext_a(1, 1, 6), ext_a(1, 1, 3)],
                ext_a(0, 0, 2),
                vec![short("example.com/aaa", 6, 2, 5, true)],
            ),
            (
                "extended resource allocatable enforced for unknown resource",
                vec![U {
                    ext_b: Some(1),
                    ..u(1, 1)
                }],
                vec![],
                u(0, 0),
                vec![short("example.com/bbb", 1, 0, 0, true)],
            ),
            (
                "extended resource allocatable enforced for unknown resource for init container",
                vec![u(0, 0)],
                vec![U {
                    ext_b: Some(1),
                    ..u(1, 1)
                }],
                u(0, 0),
                vec![short("example.com/bbb", 1, 0, 0, true)],
            ),
            (
                "kubernetes.io resource capacity enforced",
                vec![U {
                    k8s_a: Some(10),
                    ..u(1, 1)
                }],
                vec![],
                u(0, 0),
                vec![short("kubernetes.io/something", 10, 0, 0, true)],
            ),
            (
                "kubernetes.io resource capacity enforced for init container",
                vec![u(0, 0)],
                vec![U {
                    k8s_b: Some(10),
                    ..u(1, 1)
                }],
                u(0, 0),
                vec![short("subdomain.kubernetes.io/something", 10, 0, 0, true)],
            ),
            (
                "hugepages resource capacity enforced",
                vec![huge(1, 1, 10)],
                vec![],
                huge(0, 0, 0),
                vec![short("hugepages-2Mi", 10, 0, 5, true)],
            ),
            (
                "hugepages resource capacity enforced for init container",
                vec![u(0, 0)],
                vec![huge(1, 1, 10)],
                huge(0, 0, 0),
                vec![short("hugepages-2Mi", 10, 0, 5, true)],
            ),
            (
                "hugepages resource allocatable enforced for multiple containers",
                vec![huge(1, 1, 3), huge(1, 1, 3)],
                vec![],
                huge(0, 0, 2),
                vec![short("hugepages-2Mi", 6, 2, 5, true)],
            ),
            (
                "skip checking extended resource request with quantity zero",
                vec![ext_a(1, 1, 0)],
                vec![],
                ext_a(0, 0, 6),
                vec![],
            ),
            (
                "skip checking resource request with quantity zero",
                vec![ext_a(0, 0, 1)],
                vec![],
                ext_a(20, 30, 1),
                vec![],
            ),
        ];
        let node = fit_test_node(32);
        for (name, containers, init, used, want) in rows {
            let p = usage_pod(&containers, &init);
            let used = pod_requests(&usage_pod(&[used], &[]));
            let info = NodeInfo {
                node: &node,
                requested: &used,
                pod_count: 1,
            };
            assert_eq!(insufficient_resources(&p, &info), want, "{name}");
            let got = filter(&p, &info);
            if want.is_empty() {
                assert_eq!(got, Ok(()), "{name}");
            } else {
                let code = if want.iter().any(|r| r.unresolvable) {
                    Code::UnschedulableAndUnresolvable
                } else {
                    Code::Unschedulable
                };
                let reasons = want.iter().map(|r| r.reason.clone()).collect();
                assert_eq!(
                    got,
                    Err(Unfit {
                        plugin: NODE_RESOURCES_FIT,
                        stage: Stage::Node,
                        code,
                        reasons,
                    }),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn no_requests_always_fit_and_overhead_counts() {
        let node = fit_test_node(32);
        let used = pod_requests(&usage_pod(&[u(10, 20)], &[]));
        let info = NodeInfo {
            node: &node,
            requested: &used,
            pod_count: 1,
        };
        let empty: Pod = serde_json::from_value(json!({})).unwrap();
        assert_eq!(
            filter(&empty, &info),
            Ok(()),
            "no resources requested always fits"
        );

        let used = pod_requests(&usage_pod(&[u(5, 5)], &[]));
        let info = NodeInfo {
            node: &node,
            requested: &used,
            pod_count: 1,
        };
        let with_overhead = |cpu: &str, mem: &str| {
            let mut p = usage_pod(&[u(1, 1)], &[]);
            if let Some(spec) = p.spec.as_mut() {
                spec.overhead = Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity(cpu.to_string())),
                    ("memory".to_string(), Quantity(mem.to_string())),
                ]));
            }
            p
        };
        assert_eq!(
            insufficient_resources(&with_overhead("3m", "13"), &info),
            vec![]
        );
        assert_eq!(
            insufficient_resources(&with_overhead("1m", "15"), &info),
            vec![short("memory", 16, 5, 20, false)],
            "requests + overhead does not fit for memory"
        );
    }

    /// Upstream's `TestNotEnoughRequests`: one pod already fills a one-pod node, whatever
    /// else would fit.
    #[test]
    fn not_enough_pods_table() {
        let rows = [
            (
                "even without specified resources",
                vec![],
                vec![],
                u(10, 20),
            ),
            ("even if both resources fit", vec![u(1, 1)], vec![], u(5, 5)),
            ("even for equal edge case", vec![u(5, 1)], vec![], u(5, 19)),
            (
                "even for equal edge case due to init container",
                vec![u(5, 1)],
                vec![u(5, 1)],
                u(5, 19),
            ),
        ];
        let node = node(json!({
            "metadata": {"name": "kbatch-node"},
            "status": {"allocatable": {"cpu": "10m", "memory": "20", "pods": "1"}},
        }));
        for (name, containers, init, used) in rows {
            let p = usage_pod(&containers, &init);
            let used = pod_requests(&usage_pod(&[used], &[]));
            let info = NodeInfo {
                node: &node,
                requested: &used,
                pod_count: 1,
            };
            assert_eq!(
                filter(&p, &info),
                Err(Unfit::on_node(
                    NODE_RESOURCES_FIT,
                    Code::Unschedulable,
                    REASON_TOO_MANY_PODS
                )),
                "{name}"
            );
            assert_eq!(
                insufficient_resources(&p, &info),
                vec![short("pods", 1, 1, 1, false)],
                "{name}"
            );
        }
        // A node that lists no pod capacity takes no pod.
        let bare = node_without_pods();
        assert_eq!(
            check(&pod(json!({"containers": [{"name": "c"}]})), &bare),
            Err(Unfit::on_node(
                NODE_RESOURCES_FIT,
                Code::Unschedulable,
                REASON_TOO_MANY_PODS
            ))
        );
    }

    fn node_without_pods() -> Node {
        node(json!({"metadata": {"name": "kbatch-node"}, "status": {"allocatable": {"cpu": "1"}}}))
    }

    /// Upstream's `TestStorageRequests`.
    #[test]
    fn storage_requests_table() {
        let eph = |cpu, mem, eph| U { eph, ..u(cpu, mem) };
        let rows = [
            (
                "empty storage requested, and pod fits",
                u(1, 1),
                u(2, 10),
                vec![],
            ),
            (
                "storage ephemeral local storage request exceeds allocatable",
                eph(0, 0, 25),
                u(2, 2),
                vec![short("ephemeral-storage", 25, 0, 20, true)],
            ),
            (
                "ephemeral local storage is sufficient",
                eph(0, 0, 5),
                eph(2, 2, 10),
                vec![],
            ),
            ("pod fits", eph(0, 0, 10), u(2, 2), vec![]),
        ];
        let node = fit_test_node(32);
        for (name, want_pod, used, want) in rows {
            let used = pod_requests(&usage_pod(&[used], &[]));
            let info = NodeInfo {
                node: &node,
                requested: &used,
                pod_count: 1,
            };
            assert_eq!(
                insufficient_resources(&usage_pod(&[want_pod], &[]), &info),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn sidecars_count_toward_the_fit() {
        // 600m of sidecar plus a 500m app is 1100m: too much for a node with 1 cpu, though
        // each alone fits.
        let p = pod(json!({
            "initContainers": [sidecar(json!({"cpu": "600m"}))],
            "containers": [container(json!({"cpu": "500m"}))],
        }));
        let node = node(json!({"metadata": {"name": "kbatch-node"},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}));
        let err = check(&p, &node).unwrap_err();
        assert_eq!(err.reasons, ["Insufficient cpu"]);
        assert_eq!(err.code, Code::UnschedulableAndUnresolvable);
    }

    fn tainted(taints: Value) -> Node {
        node(json!({
            "metadata": {"name": "nodeA"},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
    }

    fn tolerating(tolerations: Value) -> Pod {
        pod(json!({"containers": [{"name": "c"}], "tolerations": tolerations}))
    }

    /// Upstream's `TestTaintTolerationFilter`, with 1.37's wording.
    #[test]
    fn taint_toleration_table() {
        let user1 = json!([{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}]);
        let rows = [
            (
                "no tolerations, a NoSchedule taint",
                json!([]),
                user1.clone(),
                false,
            ),
            (
                "tolerates the dedicated node of user1",
                json!([{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}]),
                user1.clone(),
                true,
            ),
            (
                "toleration for user2 on the node of user1",
                json!([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}]),
                user1.clone(),
                false,
            ),
            (
                "Exists tolerates any value",
                json!([{"key": "foo", "operator": "Exists", "effect": "NoSchedule"}]),
                json!([{"key": "foo", "value": "bar", "effect": "NoSchedule"}]),
                true,
            ),
            (
                "every taint tolerated",
                json!([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"},
                       {"key": "foo", "operator": "Exists", "effect": "NoSchedule"}]),
                json!([{"key": "dedicated", "value": "user2", "effect": "NoSchedule"},
                       {"key": "foo", "value": "bar", "effect": "NoSchedule"}]),
                true,
            ),
            (
                "key and value match but the (non-empty) effect does not",
                json!([{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}]),
                json!([{"key": "foo", "value": "bar", "effect": "NoSchedule"}]),
                false,
            ),
            (
                "an empty effect matches NoSchedule",
                json!([{"key": "foo", "operator": "Equal", "value": "bar"}]),
                json!([{"key": "foo", "value": "bar", "effect": "NoSchedule"}]),
                true,
            ),
            (
                "PreferNoSchedule never keeps a pod off",
                json!([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}]),
                json!([{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}]),
                true,
            ),
            (
                "no tolerations, a PreferNoSchedule taint",
                json!([]),
                json!([{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}]),
                true,
            ),
            (
                "NoExecute keeps a pod off too",
                json!([]),
                json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
                false,
            ),
            (
                "an empty key with Exists tolerates everything",
                json!([{"operator": "Exists"}]),
                json!([{"key": "a", "value": "b", "effect": "NoSchedule"},
                       {"key": "c", "effect": "NoExecute"}]),
                true,
            ),
            (
                "Equal without a value matches a taint without one",
                json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
                json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
                true,
            ),
            (
                "Gt is not enabled in 1.37",
                json!([{"key": "tier", "operator": "Gt", "value": "1", "effect": "NoSchedule"}]),
                json!([{"key": "tier", "value": "5", "effect": "NoSchedule"}]),
                false,
            ),
        ];
        for (name, tolerations, taints, fits) in rows {
            let want = if fits {
                Ok(())
            } else {
                Err(Unfit::on_node(
                    TAINT_TOLERATION,
                    Code::UnschedulableAndUnresolvable,
                    REASON_UNTOLERATED_TAINT,
                ))
            };
            assert_eq!(
                check(&tolerating(tolerations), &tainted(taints)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn node_unschedulable_table() {
        let cordoned = |unschedulable: bool| {
            node(json!({
                "metadata": {"name": "kbatch-node"},
                "spec": {"unschedulable": unschedulable},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
            }))
        };
        let rejected = Err(Unfit::on_node(
            NODE_UNSCHEDULABLE,
            Code::UnschedulableAndUnresolvable,
            REASON_NODE_UNSCHEDULABLE,
        ));
        let rows = [
            ("schedulable node", false, json!([]), Ok(())),
            ("cordoned, no toleration", true, json!([]), rejected.clone()),
            (
                "cordoned, tolerating the unschedulable taint",
                true,
                json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
                Ok(()),
            ),
            (
                "cordoned, tolerating everything",
                true,
                json!([{"operator": "Exists"}]),
                Ok(()),
            ),
            (
                "cordoned, tolerating only NoExecute",
                true,
                json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}]),
                rejected.clone(),
            ),
        ];
        for (name, unschedulable, tolerations, want) in rows {
            assert_eq!(
                check(&tolerating(tolerations), &cordoned(unschedulable)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn node_name_must_be_this_node_when_set() {
        let node = plain_node();
        let named = |name: &str| pod(json!({"containers": [{"name": "c"}], "nodeName": name}));
        assert_eq!(check(&named("kbatch-node"), &node), Ok(()));
        assert_eq!(check(&named(""), &node), Ok(()));
        assert_eq!(
            check(&named("other"), &node),
            Err(Unfit::on_node(
                NODE_NAME,
                Code::UnschedulableAndUnresolvable,
                REASON_NODE_NAME
            ))
        );
    }

    fn labelled(name: &str, labels: Value) -> Node {
        node(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
    }

    fn with_affinity(terms: Value) -> Pod {
        pod(json!({
            "containers": [{"name": "c"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}},
        }))
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> Value {
        if values.is_empty() {
            json!({"key": key, "operator": op})
        } else {
            json!({"key": key, "operator": op, "values": values})
        }
    }

    /// Upstream's `TestNodeAffinity` (the rows for the pod's own selector and affinity).
    #[test]
    fn node_affinity_table() {
        let selector =
            |sel: Value| pod(json!({"containers": [{"name": "c"}], "nodeSelector": sel}));
        let rows = [
            (
                "missing labels",
                selector(json!({"foo": "bar"})),
                json!({}),
                false,
            ),
            (
                "same labels",
                selector(json!({"foo": "bar"})),
                json!({"foo": "bar"}),
                true,
            ),
            (
                "node labels are superset",
                selector(json!({"foo": "bar"})),
                json!({"foo": "bar", "baz": "blah"}),
                true,
            ),
            (
                "node labels are subset",
                selector(json!({"foo": "bar", "baz": "blah"})),
                json!({"foo": "bar"}),
                false,
            ),
            (
                "In matches",
                with_affinity(
                    json!([{"matchExpressions": [expr("foo", "In", &["bar", "value2"])]}]),
                ),
                json!({"foo": "bar"}),
                true,
            ),
            (
                "Gt matches (0206 > 0204)",
                with_affinity(
                    json!([{"matchExpressions": [expr("kernel-version", "Gt", &["0204"])]}]),
                ),
                json!({"kernel-version": "0206"}),
                true,
            ),
            (
                "Lt does not match (0206 < 0204)",
                with_affinity(
                    json!([{"matchExpressions": [expr("kernel-version", "Lt", &["0204"])]}]),
                ),
                json!({"kernel-version": "0206"}),
                false,
            ),
            (
                "Gt against a label that is not a number",
                with_affinity(
                    json!([{"matchExpressions": [expr("kernel-version", "Gt", &["1"])]}]),
                ),
                json!({"kernel-version": "v2"}),
                false,
            ),
            (
                "NotIn matches",
                with_affinity(
                    json!([{"matchExpressions": [expr("mem-type", "NotIn", &["DDR", "DDR2"])]}]),
                ),
                json!({"mem-type": "DDR3"}),
                true,
            ),
            (
                "NotIn matches a node without the label",
                with_affinity(json!([{"matchExpressions": [expr("mem-type", "NotIn", &["DDR"])]}])),
                json!({}),
                true,
            ),
            (
                "Exists matches",
                with_affinity(json!([{"matchExpressions": [expr("GPU", "Exists", &[])]}])),
                json!({"GPU": "NVIDIA-GRID-K1"}),
                true,
            ),
            (
                "DoesNotExist does not match a labelled node",
                with_affinity(json!([{"matchExpressions": [expr("GPU", "DoesNotExist", &[])]}])),
                json!({"GPU": "NVIDIA-GRID-K1"}),
                false,
            ),
            (
                "affinity that does not match the node's labels",
                with_affinity(
                    json!([{"matchExpressions": [expr("foo", "In", &["value1", "value2"])]}]),
                ),
                json!({"foo": "bar"}),
                false,
            ),
            (
                "empty matchExpressions match nothing",
                with_affinity(json!([{"matchExpressions": []}])),
                json!({"foo": "bar"}),
                false,
            ),
            (
                "multiple matchExpressions ANDed, matching",
                with_affinity(json!([{"matchExpressions": [
                    expr("GPU", "Exists", &[]), expr("GPU", "NotIn", &["AMD", "INTER"])]}])),
                json!({"GPU": "NVIDIA-GRID-K1"}),
                true,
            ),
            (
                "multiple matchExpressions ANDed, not matching",
                with_affinity(json!([{"matchExpressions": [
                    expr("GPU", "Exists", &[]), expr("GPU", "In", &["AMD", "INTER"])]}])),
                json!({"GPU": "NVIDIA-GRID-K1"}),
                false,
            ),
            (
                "multiple terms ORed, one matching",
                with_affinity(json!([
                    {"matchExpressions": [expr("foo", "In", &["bar", "value2"])]},
                    {"matchExpressions": [expr("diffkey", "In", &["wrong", "value2"])]}])),
                json!({"foo": "bar"}),
                true,
            ),
            (
                "an invalid value makes the term match nothing",
                with_affinity(
                    json!([{"matchExpressions": [expr("foo", "NotIn", &["invalid value: ___@#$%^"])]}]),
                ),
                json!({"foo": "bar"}),
                false,
            ),
            (
                "an invalid key makes the term match nothing",
                with_affinity(
                    json!([{"matchExpressions": [expr("invalid key", "DoesNotExist", &[])]}]),
                ),
                json!({}),
                false,
            ),
            (
                "Gt takes exactly one value",
                with_affinity(
                    json!([{"matchExpressions": [expr("kernel-version", "Gt", &["1", "2"])]}]),
                ),
                json!({"kernel-version": "5"}),
                false,
            ),
            (
                "an unknown operator makes the term match nothing",
                with_affinity(json!([{"matchExpressions": [expr("foo", "Equals", &["bar"])]}])),
                json!({"foo": "bar"}),
                false,
            ),
            (
                "a broken term does not spoil a good one",
                with_affinity(json!([
                    {"matchExpressions": [expr("foo", "In", &[])]},
                    {"matchExpressions": [expr("foo", "Exists", &[])]}])),
                json!({"foo": "bar"}),
                true,
            ),
        ];
        for (name, pod, labels, fits) in rows {
            let want = if fits {
                Ok(())
            } else {
                Err(Unfit::on_node(
                    NODE_AFFINITY,
                    Code::UnschedulableAndUnresolvable,
                    REASON_NODE_AFFINITY,
                ))
            };
            assert_eq!(
                check(&pod, &labelled("kbatch-node", labels)),
                want,
                "{name}"
            );
        }
        // Both the selector and the affinity must hold.
        let both = |value: &str| {
            let mut p = with_affinity(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}]));
            if let Some(spec) = p.spec.as_mut() {
                spec.node_selector = Some(BTreeMap::from([("foo".to_string(), "bar".to_string())]));
            }
            check(&p, &labelled("kbatch-node", json!({"foo": value})))
        };
        assert_eq!(both("bar"), Ok(()));
        assert!(both("barrrrrr").is_err());
    }

    #[test]
    fn node_affinity_match_fields() {
        let by_name = |names: &[&str]| json!({"matchFields": [expr("metadata.name", "In", names)]});
        let excluded = Err(Unfit::on_node(
            NODE_AFFINITY,
            Code::UnschedulableAndUnresolvable,
            "node(s) didn't satisfy plugin(s) [NodeAffinity]",
        ));
        let mismatch = Err(Unfit::on_node(
            NODE_AFFINITY,
            Code::UnschedulableAndUnresolvable,
            REASON_NODE_AFFINITY,
        ));
        let foo = json!({"foo": "bar"});
        let rows = [
            (
                "names this node",
                json!([by_name(&["node1"])]),
                "node1",
                Ok(()),
            ),
            (
                "names another node",
                json!([by_name(&["node1"])]),
                "node2",
                excluded.clone(),
            ),
            (
                "fields name another node, but a second term's expressions match",
                json!([
                    {"matchFields": [expr("metadata.name", "In", &["node1"]), expr("metadata.name", "In", &["node2"])]},
                    {"matchExpressions": [expr("foo", "In", &["bar"])]}]),
                "node2",
                Ok(()),
            ),
            (
                "one term: fields name another node, expressions match",
                json!([{"matchFields": [expr("metadata.name", "In", &["node1"])],
                        "matchExpressions": [expr("foo", "In", &["bar"])]}]),
                "node2",
                excluded.clone(),
            ),
            (
                "one term: both fields and expressions match",
                json!([{"matchFields": [expr("metadata.name", "In", &["node1"])],
                        "matchExpressions": [expr("foo", "In", &["bar"])]}]),
                "node1",
                Ok(()),
            ),
            (
                "two terms, neither matching",
                json!([by_name(&["node1"]), {"matchExpressions": [expr("foo", "In", &["not-match-to-bar"])]}]),
                "node2",
                mismatch.clone(),
            ),
            (
                "two terms of node names",
                json!([by_name(&["node1"]), by_name(&["node2"])]),
                "node2",
                Ok(()),
            ),
            (
                "NotIn another node",
                json!([{"matchFields": [expr("metadata.name", "NotIn", &["node1"])]}]),
                "node2",
                Ok(()),
            ),
            (
                "NotIn this node",
                json!([{"matchFields": [expr("metadata.name", "NotIn", &["node2"])]}]),
                "node2",
                mismatch.clone(),
            ),
            (
                // The PreFilter keeps the node, but a field requirement takes one value only.
                "In with two names does not parse",
                json!([by_name(&["node1", "node2"])]),
                "node2",
                mismatch.clone(),
            ),
        ];
        for (name, terms, node_name, want) in rows {
            assert_eq!(
                check(&with_affinity(terms), &labelled(node_name, foo.clone())),
                want,
                "{name}"
            );
        }
        // A field other than metadata.name reads as empty; a node without a name has no
        // fields, and its field requirements are not checked.
        let other_field =
            with_affinity(json!([{"matchFields": [expr("spec.unschedulable", "In", &["x"])]}]));
        assert_eq!(
            check(&other_field, &labelled("node1", foo.clone())),
            mismatch
        );
        let unnamed = node(json!({"status": {"allocatable": {"pods": "1"}}}));
        assert_eq!(check(&other_field, &unnamed), Ok(()));
        let empty_field = json!([{"matchFields": [{"key": "spec.unschedulable", "operator": "In", "values": [""]}]}]);
        assert_eq!(
            check(&with_affinity(empty_field), &labelled("node1", foo.clone())),
            Ok(())
        );
        // Conflicting names within one term: the PreFilter rejects the pod outright.
        let conflict = with_affinity(json!([{"matchFields": [
            expr("metadata.name", "In", &["node1"]), expr("metadata.name", "In", &["node2"])]}]));
        assert_eq!(
            check(&conflict, &labelled("node2", foo)),
            Err(Unfit {
                plugin: NODE_AFFINITY,
                stage: Stage::PreFilter,
                code: Code::UnschedulableAndUnresolvable,
                reasons: vec![REASON_AFFINITY_CONFLICT.to_string()],
            })
        );
    }

    #[test]
    fn the_first_rejecting_plugin_wins() {
        let node = node(json!({
            "metadata": {"name": "kbatch-node", "labels": {"zone": "a"}},
            "spec": {"unschedulable": true,
                     "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
        }));
        let big = |extra: Value| {
            let mut spec = json!({"containers": [container(json!({"cpu": "2"}))], "nodeSelector": {"zone": "b"}});
            if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                spec.extend(extra.clone());
            }
            pod(spec)
        };
        let plugin = |p: &Pod| check(p, &node).map_err(|u| u.plugin);
        assert_eq!(plugin(&big(json!({}))), Err(NODE_UNSCHEDULABLE));
        let past_cordon =
            json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]);
        assert_eq!(
            plugin(&big(json!({"tolerations": past_cordon}))),
            Err(TAINT_TOLERATION)
        );
        assert_eq!(
            plugin(&big(json!({"tolerations": [{"operator": "Exists"}]}))),
            Err(NODE_AFFINITY)
        );
        let fitting_zone =
            json!({"tolerations": [{"operator": "Exists"}], "nodeSelector": {"zone": "a"}});
        assert_eq!(plugin(&big(fitting_zone)), Err(NODE_RESOURCES_FIT));
    }

    #[test]
    fn message_for_insufficient_resources() {
        let node = plain_node();
        let used = requests(3500, 6 << 30);
        let info = NodeInfo {
            node: &node,
            requested: &used,
            pod_count: 3,
        };
        let p = pod(json!({"containers": [container(json!({"cpu": "1", "memory": "4Gi"}))]}));
        let unfit = filter(&p, &info).unwrap_err();
        assert_eq!(
            fit_error_message(&p, &unfit),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. \
             no new claims to deallocate, preemption: 0/1 nodes are available: \
             1 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn message_when_the_pod_exceeds_the_whole_node() {
        let p = pod(json!({"containers": [container(json!({"cpu": "6", "memory": "2Gi"}))]}));
        let unfit = check(&p, &plain_node()).unwrap_err();
        assert_eq!(unfit.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            fit_error_message(&p, &unfit),
            "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, \
             preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn message_reasons_are_counted_and_sorted_bytewise() {
        let node = node(json!({
            "metadata": {"name": "kbatch-node"},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "2",
                                       "example.com/aaa": "4", "hugepages-2Mi": "4Mi"}},
        }));
        let mut used = requests(900, 1 << 30);
        used.scalar.insert("example.com/aaa".into(), 4);
        used.scalar.insert("hugepages-2Mi".into(), 4 << 20);
        let info = NodeInfo {
            node: &node,
            requested: &used,
            pod_count: 2,
        };
        let p = pod(json!({"containers": [container(json!({
            "cpu": "200m", "memory": "1", "example.com/aaa": "1", "hugepages-2Mi": "2Mi"}))]}));
        let unfit = filter(&p, &info).unwrap_err();
        assert_eq!(
            unfit.reasons,
            [
                "Too many pods",
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient example.com/aaa",
                "Insufficient hugepages-2Mi"
            ]
        );
        assert_eq!(
            fit_error_message(&p, &unfit),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient example.com/aaa, \
             1 Insufficient hugepages-2Mi, 1 Insufficient memory, 1 Too many pods. \
             no new claims to deallocate, preemption: 0/1 nodes are available: \
             1 No preemption victims found for incoming pod."
        );
        // Upper case sorts before lower case, as Go's byte order has it.
        let unfit = Unfit {
            plugin: NODE_RESOURCES_FIT,
            stage: Stage::Node,
            code: Code::Unschedulable,
            reasons: vec!["b".into(), "B".into(), "a".into(), "b".into()],
        };
        assert!(
            fit_error_message(&p, &unfit).starts_with("0/1 nodes are available: 1 B, 1 a, 2 b. ")
        );
        // The counted strings are sorted, not the reasons: "1 b" before "2 a".
        let unfit = Unfit {
            reasons: vec!["b".into(), "a".into(), "a".into()],
            ..unfit
        };
        assert!(fit_error_message(&p, &unfit).starts_with("0/1 nodes are available: 1 b, 2 a. "));
    }

    #[test]
    fn message_for_filters_that_preemption_cannot_help() {
        let not_helpful = " no new claims to deallocate, preemption: 0/1 nodes are available: \
                           1 Preemption is not helpful for scheduling.";
        let p = tolerating(json!([]));
        let cases = [
            (
                tainted(json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])),
                "0/1 nodes are available: 1 node(s) had untolerated taint(s).",
            ),
            (
                node(json!({"metadata": {"name": "kbatch-node"}, "spec": {"unschedulable": true}})),
                "0/1 nodes are available: 1 node(s) were unschedulable.",
            ),
        ];
        for (node, want) in cases {
            let unfit = check(&p, &node).unwrap_err();
            assert_eq!(
                fit_error_message(&p, &unfit),
                format!("{want}{not_helpful}")
            );
        }
        let p = pod(json!({"containers": [{"name": "c"}], "nodeSelector": {"disk": "ssd"}}));
        let unfit = check(&p, &plain_node()).unwrap_err();
        assert_eq!(
            fit_error_message(&p, &unfit),
            format!(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.{not_helpful}"
            )
        );
        let p =
            with_affinity(json!([{"matchFields": [expr("metadata.name", "In", &["elsewhere"])]}]));
        let unfit = check(&p, &plain_node()).unwrap_err();
        assert_eq!(
            fit_error_message(&p, &unfit),
            format!(
                "0/1 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity].{not_helpful}"
            )
        );
    }

    #[test]
    fn message_for_a_pre_filter_rejection_ends_with_not_found() {
        let p = with_affinity(json!([{"matchFields": [
            expr("metadata.name", "In", &["node1"]), expr("metadata.name", "In", &["node2"])]}]));
        let unfit = check(&p, &plain_node()).unwrap_err();
        assert_eq!(
            fit_error_message(&p, &unfit),
            "0/1 nodes are available: pod affinity terms conflict. not found"
        );
    }

    #[test]
    fn message_for_a_pod_that_may_not_preempt() {
        let never = |spec: Value| {
            let mut p = pod(spec);
            if let Some(spec) = p.spec.as_mut() {
                spec.preemption_policy = Some("Never".into());
            }
            p
        };
        let p = never(json!({"containers": [container(json!({"cpu": "1"}))]}));
        let node = plain_node();
        let used = requests(4000, 0);
        let info = NodeInfo {
            node: &node,
            requested: &used,
            pod_count: 1,
        };
        let unfit = filter(&p, &info).unwrap_err();
        assert_eq!(
            fit_error_message(&p, &unfit),
            "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, \
             preemption: not eligible due to preemptionPolicy=Never."
        );
        // The policy is checked before the node's status.
        let p = never(json!({"containers": [{"name": "c"}], "nodeSelector": {"disk": "ssd"}}));
        let unfit = check(&p, &node).unwrap_err();
        assert!(
            fit_error_message(&p, &unfit)
                .ends_with("preemption: not eligible due to preemptionPolicy=Never.")
        );
        // PreemptLowerPriority is the default's wording.
        let mut p = pod(json!({"containers": [container(json!({"cpu": "1"}))]}));
        if let Some(spec) = p.spec.as_mut() {
            spec.preemption_policy = Some("PreemptLowerPriority".into());
        }
        let unfit = filter(&p, &info).unwrap_err();
        assert!(
            fit_error_message(&p, &unfit)
                .ends_with("1 No preemption victims found for incoming pod.")
        );
    }

    #[test]
    fn a_fitting_pod_passes_every_filter() {
        let node = node(json!({
            "metadata": {"name": "kbatch-node", "labels": {"kubernetes.io/os": "linux"}},
            "spec": {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110",
                                       "ephemeral-storage": "100Gi", "example.com/gpu": "2"}},
        }));
        let used = requests(2000, 4 << 30);
        let info = NodeInfo {
            node: &node,
            requested: &used,
            pod_count: 109,
        };
        let p = pod(json!({
            "containers": [container(json!({"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi",
                                            "example.com/gpu": "2"}))],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
        }));
        assert_eq!(filter(&p, &info), Ok(()));
        // One more pod does not.
        let full = NodeInfo {
            pod_count: 110,
            ..info
        };
        assert_eq!(
            filter(&p, &full).unwrap_err().reasons,
            [REASON_TOO_MANY_PODS]
        );
    }

    #[test]
    fn event_message_is_cut_to_the_event_limit() {
        assert_eq!(event_message("short"), "short");
        let exact = "x".repeat(1024);
        assert_eq!(event_message(&exact), exact);
        let long = "y".repeat(1500);
        let cut = event_message(&long);
        assert_eq!(cut.len(), 1024);
        assert!(cut.ends_with("y ..."));
        // Never inside a character.
        let wide = "é".repeat(600);
        let cut = event_message(&wide);
        assert!(cut.len() <= 1024 && cut.ends_with(" ..."));
    }

    #[test]
    fn scheduling_gates_are_reported() {
        let gated = pod(
            json!({"containers": [{"name": "c"}], "schedulingGates": [{"name": "example.com/wait"}]}),
        );
        assert!(scheduling_gated(&gated));
        assert!(!scheduling_gated(&pod(
            json!({"containers": [{"name": "c"}], "schedulingGates": []})
        )));
        assert!(!scheduling_gated(&pod(
            json!({"containers": [{"name": "c"}]})
        )));
        assert_eq!(
            SCHEDULING_GATED_MESSAGE,
            "Scheduling is blocked due to non-empty scheduling gates"
        );
    }

    #[test]
    fn names_are_validated_as_upstream_validates_them() {
        for ok in ["foo", "example.com/foo", "a.b-c_d", "k8s.io/x.y", "A1"] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in [
            "",
            "/foo",
            "foo/",
            "a/b/c",
            "-foo",
            "foo_",
            "Example.com/foo",
            "-example.com/foo",
            "example..com/foo",
            "invalid key",
            &"a".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        assert!(is_label_value(""));
        assert!(is_label_value("0204"));
        assert!(!is_label_value("-1"));
        assert!(!is_label_value(&"v".repeat(64)));
    }
}
