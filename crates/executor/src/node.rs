//! The Node object and its heartbeat, as kubelet keeps them: the Node is created (or its status
//! refreshed through `nodes/status`) at start, and a Lease named after the node in
//! `kube-node-lease` is renewed every 10 s.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use kbatch_api::k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kbatch_api::k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    MicroTime, ObjectMeta, OwnerReference, Time,
};
use kbatch_api::quantity_text;
use kube::api::{Api, PostParams};

use crate::machine::Machine;
use crate::{ExecutorConfig, RuntimeKind, time};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// kubelet's `nodeLeaseDurationSeconds`.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// kubelet renews its lease every quarter of the duration.
pub const LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// kubelet's `nodeStatusReportFrequency`: the status is re-posted this often when unchanged.
pub const NODE_STATUS_REPORT_INTERVAL: Duration = Duration::from_secs(300);
/// The version kbatch reports as its kubelet's (the upstream release it follows).
pub const KUBELET_VERSION: &str = concat!("v1.37.0-kbatch.", env!("CARGO_PKG_VERSION"));
/// The address pods and the node report (every pod shares the host's network).
pub const HOST_IP: &str = "127.0.0.1";

/// kubelet's default hard eviction thresholds, which its allocatable sets aside:
/// `memory.available<100Mi` and `nodefs.available<10%` (a Go float32, as the threshold keeps
/// its percentage). Nothing is reserved for the system or kubelet (`--system-reserved` and
/// `--kube-reserved` unset).
const EVICTION_MEMORY_BYTES: u64 = 100 << 20;
const EVICTION_NODEFS_SHARE: f32 = 0.1;

/// The machine: cores, memory, the data dir's filesystem, and `max_pods`.
pub fn capacity(machine: &Machine, config: &ExecutorConfig) -> BTreeMap<String, Quantity> {
    resources(
        machine,
        config,
        machine.memory_kib * 1024,
        machine.storage_kib * 1024,
    )
}

/// The capacity less the hard eviction thresholds, as kubelet's `GetNodeAllocatableReservation`
/// computes it.
pub fn allocatable(machine: &Machine, config: &ExecutorConfig) -> BTreeMap<String, Quantity> {
    let memory = machine.memory_kib * 1024;
    let storage = machine.storage_kib * 1024;
    let storage_reserved = (storage as f64 * f64::from(EVICTION_NODEFS_SHARE)) as u64;
    resources(
        machine,
        config,
        memory.saturating_sub(EVICTION_MEMORY_BYTES),
        storage.saturating_sub(storage_reserved),
    )
}

fn resources(
    machine: &Machine,
    config: &ExecutorConfig,
    memory: u64,
    storage: u64,
) -> BTreeMap<String, Quantity> {
    let mut resources = BTreeMap::new();
    resources.insert("cpu".to_string(), Quantity(machine.cpus.to_string()));
    resources.insert(
        "memory".to_string(),
        Quantity(quantity_text::memory(memory)),
    );
    resources.insert(
        "ephemeral-storage".to_string(),
        Quantity(quantity_text::memory(storage)),
    );
    resources.insert("pods".to_string(), Quantity(config.max_pods.to_string()));
    resources
}

/// The Node's status now; condition transition times are kept from `previous` when the
/// condition's status did not change.
pub fn node_status(
    machine: &Machine,
    config: &ExecutorConfig,
    now: Timestamp,
    previous: Option<&NodeStatus>,
) -> NodeStatus {
    let capacity = capacity(machine, config);
    let allocatable = allocatable(machine, config);
    let now_time = Time(time::seconds(now));
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let transition = previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now_time.clone());
        NodeCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            last_heartbeat_time: Some(now_time.clone()),
            last_transition_time: Some(transition),
        }
    };
    let runtime = match config.runtime {
        RuntimeKind::Process => "process",
        RuntimeKind::Simulate => "simulate",
    };
    NodeStatus {
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_string(),
                address: HOST_IP.to_string(),
            },
            NodeAddress {
                type_: "Hostname".to_string(),
                address: config.node_name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            // The streaming endpoint, where the API server sends `pods/exec`.
            kubelet_endpoint: Some(DaemonEndpoint {
                port: config.streaming_port.map_or(0, i32::from),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: machine.architecture.clone(),
            boot_id: machine.boot_id.clone(),
            container_runtime_version: format!("kbatch-{runtime}://{}", env!("CARGO_PKG_VERSION")),
            kernel_version: machine.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.to_string(),
            machine_id: machine.machine_id.clone(),
            operating_system: "linux".to_string(),
            os_image: machine.os_image.clone(),
            system_uuid: machine.machine_id.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A new Node object for this executor, status included (a node reports its own status on create).
pub fn node_object(machine: &Machine, config: &ExecutorConfig, now: Timestamp) -> Node {
    let mut labels = BTreeMap::new();
    for (k, v) in [
        ("kubernetes.io/hostname", config.node_name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", machine.architecture.as_str()),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", machine.architecture.as_str()),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
    Node {
        metadata: ObjectMeta {
            name: Some(config.node_name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: None,
        status: Some(node_status(machine, config, now, None)),
    }
}

/// Create the Node, or refresh the status of the one a previous run left. Returns the Node as
/// stored (its uid owns the Lease).
pub async fn register(
    client: &kube::Client,
    machine: &Machine,
    config: &ExecutorConfig,
) -> Result<Node, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pp = PostParams::default();
    match nodes
        .create(&pp, &node_object(machine, config, Timestamp::now()))
        .await
    {
        Ok(n) => Ok(n),
        Err(kube::Error::Api(s)) if s.code == 409 => refresh_status(&nodes, machine, config).await,
        Err(e) => Err(e),
    }
}

async fn refresh_status(
    nodes: &Api<Node>,
    machine: &Machine,
    config: &ExecutorConfig,
) -> Result<Node, kube::Error> {
    let mut last = None;
    for _ in 0..5 {
        let mut node = nodes.get(&config.node_name).await?;
        node.status = Some(node_status(
            machine,
            config,
            Timestamp::now(),
            node.status.as_ref(),
        ));
        match nodes
            .replace_status(&config.node_name, &PostParams::default(), &node)
            .await
        {
            Ok(n) => return Ok(n),
            Err(kube::Error::Api(s)) if s.code == 409 => last = Some(kube::Error::Api(s)),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| kube::Error::Service("node status update did not converge".into())))
}

/// The Lease kubelet keeps for its node.
pub fn lease_object(node: &Node, now: Timestamp) -> Lease {
    let name = node.metadata.name.clone().unwrap_or_default();
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(LEASE_NAMESPACE.to_string()),
            owner_references: node.metadata.uid.clone().map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".to_string(),
                    kind: "Node".to_string(),
                    name: name.clone(),
                    uid,
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Renew the Lease (create it when missing).
pub async fn renew_lease(client: &kube::Client, node: &Node) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let name = node.metadata.name.clone().unwrap_or_default();
    let now = Timestamp::now();
    match leases.get_opt(&name).await? {
        None => match leases
            .create(&PostParams::default(), &lease_object(node, now))
            .await
        {
            Ok(_) => Ok(()),
            // Created meanwhile: the next tick renews it.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        },
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(name.clone());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            spec.renew_time = Some(MicroTime(now));
            match leases.replace(&name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }
}

/// Renew the Lease every 10 s and re-post the Node status every 5 minutes until shutdown.
pub async fn heartbeat(
    client: kube::Client,
    machine: Machine,
    config: ExecutorConfig,
    node: Node,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut lease_tick = tokio::time::interval(LEASE_RENEW_INTERVAL);
    lease_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut status_tick = tokio::time::interval(NODE_STATUS_REPORT_INTERVAL);
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Both intervals fire at once; the Node was just registered.
    status_tick.tick().await;
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        tokio::select! {
            _ = lease_tick.tick() => {
                if let Err(e) = renew_lease(&client, &node).await {
                    tracing::warn!(error = %e, node = %config.node_name, "renewing the node lease");
                }
            }
            _ = status_tick.tick() => {
                if let Err(e) = refresh_status(&nodes, &machine, &config).await {
                    tracing::warn!(error = %e, node = %config.node_name, "updating the node status");
                }
            }
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine {
            cpus: 4,
            memory_kib: 1024,
            storage_kib: 4096,
            kernel_version: "6.1.0".into(),
            os_image: "Debian".into(),
            machine_id: "abc".into(),
            boot_id: "b".into(),
            architecture: "amd64".into(),
        }
    }

    #[test]
    fn status_reports_capacity_and_ready() {
        let config = ExecutorConfig::new("data".into());
        let t0: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let s = node_status(&machine(), &config, t0, None);
        let cap = s.capacity.clone().unwrap();
        assert_eq!(cap["cpu"].0, "4");
        assert_eq!(cap["memory"].0, "1Mi");
        assert_eq!(cap["pods"].0, "110");
        assert_eq!(cap["ephemeral-storage"].0, "4Mi");
        // The hard eviction thresholds are set aside: 100Mi of memory (more than this
        // machine has), 10% of the storage.
        let alloc = s.allocatable.clone().unwrap();
        assert_eq!(alloc["cpu"].0, "4");
        assert_eq!(alloc["memory"].0, "0");
        assert_eq!(alloc["ephemeral-storage"].0, "3774874");
        assert_eq!(alloc["pods"].0, "110");
        let big = Machine {
            memory_kib: 8_148_008,
            storage_kib: 20_466_256,
            ..machine()
        };
        let alloc = allocatable(&big, &config);
        assert_eq!(alloc["memory"].0, "8045608Ki");
        assert_eq!(alloc["ephemeral-storage"].0, "18861701499");
        let port = |s: &NodeStatus| {
            s.daemon_endpoints
                .as_ref()
                .and_then(|d| d.kubelet_endpoint.as_ref())
                .map(|e| e.port)
        };
        assert_eq!(port(&s), Some(0));
        let listening = ExecutorConfig {
            streaming_port: Some(41234),
            ..config.clone()
        };
        assert_eq!(
            port(&node_status(&machine(), &listening, t0, None)),
            Some(41234)
        );
        let ready = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("kubelet is posting ready status")
        );
        // A later report keeps the transition time and moves the heartbeat.
        let t1: Timestamp = "2024-01-01T00:05:00Z".parse().unwrap();
        let s2 = node_status(&machine(), &config, t1, Some(&s));
        let ready2 = s2
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready2.last_transition_time, Some(Time(t0)));
        assert_eq!(ready2.last_heartbeat_time, Some(Time(t1)));
    }

    #[test]
    fn lease_is_owned_by_the_node() {
        let mut node = node_object(
            &machine(),
            &ExecutorConfig::new("data".into()),
            Timestamp::now(),
        );
        node.metadata.uid = Some("u1".into());
        let lease = lease_object(&node, Timestamp::now());
        assert_eq!(lease.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        assert_eq!(lease.metadata.name.as_deref(), Some("kbatch-node"));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(spec.holder_identity.as_deref(), Some("kbatch-node"));
        assert_eq!(lease.metadata.owner_references.unwrap()[0].uid, "u1");
    }
}
