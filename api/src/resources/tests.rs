use super::*;
use crate::quantity::QuantityError;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn list(entries: &[(&str, &str)]) -> Option<ResourceList> {
    Some(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect(),
    )
}

fn container(name: &str, requests: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: list(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sidecar(name: &str, requests: &[(&str, &str)]) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..container(name, requests)
    }
}

fn pod(containers: Vec<Container>, init: Vec<Container>, overhead: &[(&str, &str)]) -> Pod {
    Pod {
        spec: Some(PodSpec {
            containers,
            init_containers: Some(init),
            overhead: if overhead.is_empty() { None } else { list(overhead) },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cpu_mem(cpu_milli: i64, memory_bytes: i64) -> CpuMemory {
    CpuMemory {
        cpu_milli,
        memory_bytes,
    }
}

#[test]
fn pod_requests_like_kubernetes() {
    let cases: Vec<(&str, Pod, CpuMemory)> = vec![
        ("no spec", Pod::default(), cpu_mem(0, 0)),
        ("empty", pod(vec![], vec![], &[]), cpu_mem(0, 0)),
        (
            "sum of containers",
            pod(
                vec![
                    container("a", &[("cpu", "500m"), ("memory", "1Gi")]),
                    container("b", &[("cpu", "1.5")]),
                ],
                vec![],
                &[],
            ),
            cpu_mem(2000, 1 << 30),
        ),
        (
            "init container above the sum wins per resource",
            pod(
                vec![container("a", &[("cpu", "1"), ("memory", "100")])],
                vec![container("init", &[("cpu", "3"), ("memory", "10")])],
                &[],
            ),
            cpu_mem(3000, 100),
        ),
        (
            "init containers run one at a time",
            pod(
                vec![container("a", &[("cpu", "1")])],
                vec![container("i1", &[("cpu", "2")]), container("i2", &[("cpu", "2")])],
                &[],
            ),
            cpu_mem(2000, 0),
        ),
        (
            "sidecars add up and run with later init containers",
            pod(
                vec![container("a", &[("cpu", "1")])],
                vec![sidecar("s", &[("cpu", "500m")]), container("i", &[("cpu", "2")])],
                &[],
            ),
            cpu_mem(2500, 0),
        ),
        (
            "sidecar alone adds to the sum",
            pod(
                vec![container("a", &[("cpu", "1")])],
                vec![sidecar("s", &[("cpu", "500m")])],
                &[],
            ),
            cpu_mem(1500, 0),
        ),
        (
            "overhead added last",
            pod(
                vec![container("a", &[("cpu", "1")])],
                vec![container("i", &[("cpu", "2")])],
                &[("cpu", "250m"), ("memory", "120Mi")],
            ),
            cpu_mem(2250, 120 << 20),
        ),
        (
            "sub-milli cpu rounds up",
            pod(vec![container("a", &[("cpu", "0.1m")])], vec![], &[]),
            cpu_mem(1, 0),
        ),
    ];
    for (name, pod, expected) in cases {
        assert_eq!(pod_cpu_memory_requests(&pod), Ok(expected), "{name}");
    }
}

#[test]
fn pod_level_requests_replace_cpu_and_memory_only() {
    let mut p = pod(
        vec![container("a", &[("cpu", "1"), ("memory", "1Gi"), ("pods", "1")])],
        vec![],
        &[("cpu", "100m")],
    );
    if let Some(spec) = p.spec.as_mut() {
        spec.resources = Some(ResourceRequirements {
            requests: list(&[("cpu", "4")]),
            ..Default::default()
        });
    }
    let requests = pod_requests(&p).unwrap();
    assert_eq!(requests.get("cpu"), Some(&4100));
    assert_eq!(requests.get("memory"), Some(&(1 << 30)));
    assert_eq!(requests.get("pods"), Some(&1));
}

#[test]
fn batch_resources_through_current_and_deprecated_names() {
    let p = pod(
        vec![
            container(
                "new",
                &[(RESOURCE_BATCH_CPU, "4k"), (RESOURCE_BATCH_MEMORY, "4Gi")],
            ),
            container(
                "old",
                &[
                    (DEPRECATED_RESOURCE_BATCH_CPU, "1000"),
                    (DEPRECATED_RESOURCE_BATCH_MEMORY, "3456Mi"),
                ],
            ),
            container(
                "both",
                &[
                    (RESOURCE_BATCH_CPU, "500"),
                    (DEPRECATED_RESOURCE_BATCH_CPU, "9000"),
                ],
            ),
        ],
        vec![],
        &[],
    );
    assert_eq!(
        pod_batch_requests(&p),
        Ok(cpu_mem(5500, (4 << 30) + 3456 * (1 << 20)))
    );
    assert!(requests_batch_resources(&p));
    let plain = pod(vec![container("a", &[("cpu", "1")])], vec![], &[]);
    assert!(!requests_batch_resources(&plain));
    assert_eq!(pod_batch_requests(&plain), Ok(cpu_mem(0, 0)));
    let old_only = pod(
        vec![container("a", &[(DEPRECATED_RESOURCE_BATCH_MEMORY, "1")])],
        vec![],
        &[],
    );
    assert!(requests_batch_resources(&old_only));
}

#[test]
fn container_batch_requests_and_limits() {
    let c = Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            requests: list(&[
                (RESOURCE_BATCH_CPU, "4k"),
                (DEPRECATED_RESOURCE_BATCH_MEMORY, "4Gi"),
            ]),
            limits: list(&[(RESOURCE_BATCH_CPU, "6000")]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let amounts = container_amounts(&c).unwrap();
    assert_eq!(amounts.batch_cpu_request(), Some(4000));
    assert_eq!(amounts.batch_memory_request(), Some(4 << 30));
    assert_eq!(amounts.batch_cpu_limit(), Some(6000));
    assert_eq!(amounts.batch_memory_limit(), None);
    assert_eq!(
        container_amounts(&Container::default()),
        Ok(ContainerAmounts::default())
    );
}

#[test]
fn bad_quantities_name_the_container() {
    let p = pod(
        vec![container("app", &[("cpu", "1"), ("memory", "1 Gi")])],
        vec![],
        &[],
    );
    let err = pod_requests(&p).unwrap_err();
    assert_eq!(
        err,
        PodResourceError::Container {
            container: "app".into(),
            source: ResourceError::Quantity {
                resource: "memory".into(),
                source: QuantityError::UnknownSuffix {
                    quantity: "1 Gi".into(),
                    suffix: " Gi".into()
                }
            }
        }
    );
    assert!(err.to_string().starts_with("container app: resource memory: "));
    let p = pod(vec![], vec![], &[("cpu", "x")]);
    assert!(matches!(pod_requests(&p), Err(PodResourceError::Overhead(_))));
    let huge = "9223372036854775807";
    let p = pod(
        vec![
            container("a", &[("pods", huge)]),
            container("b", &[("pods", huge)]),
        ],
        vec![],
        &[],
    );
    assert!(matches!(
        pod_requests(&p),
        Err(PodResourceError::Total(ResourceError::Overflow { .. }))
    ));
}
