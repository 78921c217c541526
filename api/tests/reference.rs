//! The checked-in configuration reference is exactly what the generator writes, and the
//! generator really reads defaults and ranges from the code.

use std::path::PathBuf;

use koord_api::reference::{REFERENCE_PATH, REGENERATE_COMMAND, configuration_reference};

#[test]
fn checked_in_reference_matches_the_types() {
    let generated = configuration_reference().expect("the reference generates");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(REFERENCE_PATH);
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{REFERENCE_PATH} is out of date with the api types; regenerate it with `{REGENERATE_COMMAND}`"
    );
}

#[test]
fn every_configmap_key_and_crd_has_a_section() {
    let text = configuration_reference().expect("the reference generates");
    for key in koord_api::config::ConfigKey::ALL {
        assert!(
            text.contains(&format!("### `{}`", key.name())),
            "no section for {key}"
        );
    }
    for kind in ["## NodeSLO", "## NodeMetric", "## ClusterColocationProfile"] {
        assert!(text.contains(kind), "no section {kind}");
    }
}

#[test]
fn defaults_and_ranges_come_from_the_code() {
    let text = configuration_reference().expect("the reference generates");
    let row = |field: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| `{field}` |")))
            .unwrap_or_else(|| panic!("no row for {field}"))
            .to_owned()
    };
    // Default from ColocationStrategy::builtin_default, range from the validator's (0, 1].
    assert!(row("resourceDiffThreshold").contains("| `0.1` | (0, 1] |"));
    // Integer bounds and the lower<upper pair rule of resource-threshold-config.
    assert!(row("memoryEvictLowerPercent").contains("< `memoryEvictThresholdPercent`; [0, 100]"));
    assert!(row("cpuSuppressThresholdPercent").contains("| `65` | [0, 100] |"));
    // Allowed values of a free string, from the validator's list.
    assert!(row("metricMemoryCollectPolicy").contains("one of: usageWithoutPageCache"));
    // CRD fields come from the CRD schema.
    assert!(text.contains("| `spec.resourceUsedThresholdWithBE"));
}
