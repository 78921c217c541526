use super::*;

fn q(s: &str) -> ExactQuantity {
    ExactQuantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn parses_every_form_exactly() {
    // (input, exact nanos)
    let cases: &[(&str, i128)] = &[
        ("0", 0),
        ("4k", 4_000 * NANOS_PER_UNIT),
        ("3456Mi", 3456 * (1 << 20) * NANOS_PER_UNIT),
        ("500m", 500 * NANOS_PER_MILLI),
        ("1.5", 1_500_000_000),
        ("1.5Gi", 1_610_612_736 * NANOS_PER_UNIT),
        ("0.1m", 100_000),
        ("1e3", 1_000 * NANOS_PER_UNIT),
        ("1E3", 1_000 * NANOS_PER_UNIT),
        ("1e+3", 1_000 * NANOS_PER_UNIT),
        ("5e-3", 5 * NANOS_PER_MILLI),
        ("2E", 2_000_000_000_000_000_000 * NANOS_PER_UNIT),
        ("1Ki", 1024 * NANOS_PER_UNIT),
        ("1Ei", (1i128 << 60) * NANOS_PER_UNIT),
        ("0.3Ki", 307_200_000_000),
        ("17828Ki", 17_828 * 1024 * NANOS_PER_UNIT),
        ("1815637738", 1_815_637_738 * NANOS_PER_UNIT),
        ("138m", 138 * NANOS_PER_MILLI),
        ("250n", 250),
        ("7u", 7_000),
        ("-2", -2 * NANOS_PER_UNIT),
        ("+2", 2 * NANOS_PER_UNIT),
        ("-0.5m", -500_000),
        (".5", 500_000_000),
        ("5.", 5 * NANOS_PER_UNIT),
        ("007", 7 * NANOS_PER_UNIT),
        ("1.000000000000000000000000000000000000000000", NANOS_PER_UNIT),
        ("0e999999999", 0),
        ("1e-20", 1),
        ("1e-2147483648", 1),
        ("9223372036854775807", MAX_NANOS),
        ("-9223372036854775807", -MAX_NANOS),
        ("0.0000000001", 1),
        ("1.0000000001", NANOS_PER_UNIT + 1),
        ("-0.0000000001", -1),
    ];
    for &(input, nanos) in cases {
        assert_eq!(q(input).nanos(), nanos, "{input}");
    }
}

#[test]
fn rejects_garbage_without_panicking() {
    let cases: &[(&str, QuantityError)] = &[
        ("", QuantityError::Empty),
        ("abc", QuantityError::NotANumber("abc".into())),
        ("-", QuantityError::NotANumber("-".into())),
        (".", QuantityError::NotANumber(".".into())),
        ("m", QuantityError::NotANumber("m".into())),
        ("--1", QuantityError::NotANumber("--1".into())),
        (" 1", QuantityError::NotANumber(" 1".into())),
        (
            "1 ",
            QuantityError::UnknownSuffix {
                quantity: "1 ".into(),
                suffix: " ".into(),
            },
        ),
        (
            "1K",
            QuantityError::UnknownSuffix {
                quantity: "1K".into(),
                suffix: "K".into(),
            },
        ),
        (
            "1KI",
            QuantityError::UnknownSuffix {
                quantity: "1KI".into(),
                suffix: "KI".into(),
            },
        ),
        (
            "1mi",
            QuantityError::UnknownSuffix {
                quantity: "1mi".into(),
                suffix: "mi".into(),
            },
        ),
        (
            "1e",
            QuantityError::UnknownSuffix {
                quantity: "1e".into(),
                suffix: "e".into(),
            },
        ),
        (
            "1e+",
            QuantityError::UnknownSuffix {
                quantity: "1e+".into(),
                suffix: "e+".into(),
            },
        ),
        (
            "1e1.5",
            QuantityError::UnknownSuffix {
                quantity: "1e1.5".into(),
                suffix: "e1.5".into(),
            },
        ),
        (
            "1.2.3",
            QuantityError::UnknownSuffix {
                quantity: "1.2.3".into(),
                suffix: ".3".into(),
            },
        ),
        (
            "1Gi1",
            QuantityError::UnknownSuffix {
                quantity: "1Gi1".into(),
                suffix: "Gi1".into(),
            },
        ),
        (
            "9223372036854775808",
            QuantityError::Overflow("9223372036854775808".into()),
        ),
        (
            "-9223372036854775808",
            QuantityError::Overflow("-9223372036854775808".into()),
        ),
        ("10E", QuantityError::Overflow("10E".into())),
        ("8Ei", QuantityError::Overflow("8Ei".into())),
        ("1e19", QuantityError::Overflow("1e19".into())),
        ("1e2147483648", QuantityError::Overflow("1e2147483648".into())),
        ("1e99999", QuantityError::Overflow("1e99999".into())),
        (
            "123456789012345678901234567890123456789",
            QuantityError::TooPrecise("123456789012345678901234567890123456789".into()),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(ExactQuantity::parse(input).as_ref(), Err(expected), "{input:?}");
    }
}

#[test]
fn milli_value_and_value_round_away_from_zero_like_go() {
    let cases: &[(&str, i64, i64)] = &[
        // (input, milli_value, value)
        ("0.1m", 1, 1),
        ("1m", 1, 1),
        ("500m", 500, 1),
        ("1500m", 1500, 2),
        ("1.5", 1500, 2),
        ("4k", 4_000_000, 4_000),
        ("1000", 1_000_000, 1_000),
        ("3456Mi", 3_623_878_656_000, 3_623_878_656),
        ("4Gi", 4_294_967_296_000, 4_294_967_296),
        ("1n", 1, 1),
        ("-0.1m", -1, -1),
        ("-1500m", -1500, -2),
        ("0", 0, 0),
    ];
    for &(input, milli, value) in cases {
        assert_eq!(q(input).milli_value(), Ok(milli), "milli {input}");
        assert_eq!(q(input).value(), value, "value {input}");
    }
}

#[test]
fn milli_value_overflow_is_an_error_not_a_wrap() {
    let big = q("9223372036854775807");
    assert_eq!(big.value(), i64::MAX);
    assert!(matches!(big.milli_value(), Err(QuantityError::Overflow(_))));
    assert_eq!(q("9223372036854775").milli_value(), Ok(9_223_372_036_854_775_000));
}

#[test]
fn display_is_canonical_decimal_and_round_trips() {
    let cases: &[(&str, &str)] = &[
        ("1.5", "1500m"),
        ("4000", "4k"),
        ("4k", "4k"),
        ("1e3", "1k"),
        ("0.1m", "100u"),
        ("1Ki", "1024"),
        ("1.5Gi", "1610612736"),
        ("250n", "250n"),
        ("-2000m", "-2"),
        ("0m", "0"),
        ("25000", "25k"),
    ];
    for &(input, canonical) in cases {
        let parsed = q(input);
        assert_eq!(parsed.to_string(), canonical, "{input}");
        assert_eq!(q(canonical), parsed, "{canonical} round trip");
    }
}

#[test]
fn arithmetic_is_checked() {
    assert_eq!(q("1.5").checked_add(q("500m")), Ok(q("2")));
    assert_eq!(q("1").checked_sub(q("1500m")), Ok(q("-500m")));
    let max = q("9223372036854775807");
    assert!(matches!(
        max.checked_add(q("1n")),
        Err(QuantityError::Overflow(_))
    ));
    assert!(ExactQuantity::from_nanos(-MAX_NANOS - 1).is_err());
    assert_eq!(ExactQuantity::from_milli(1500), q("1.5"));
    assert_eq!(ExactQuantity::from_units(-3), q("-3"));
    assert!(q("1m") < q("0.002"));
    assert!(q("-1").is_negative() && q("0").is_zero());
}

#[test]
fn canonical_formatting_helpers() {
    assert_eq!(format_milli_cores(25_000).0, "25000");
    assert_eq!(format_bytes(33_000_000_000).0, "33000000000");
    assert_eq!(format_cpu_cores(500).0, "500m");
    assert_eq!(format_cpu_cores(2_000).0, "2");
    assert_eq!(format_cpu_cores(1_500).0, "1500m");
}

fn list(entries: &[(&str, &str)]) -> ResourceList {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn amounts(entries: &[(&str, i64)]) -> ResourceAmounts {
    entries.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[test]
fn resource_lists_become_integer_amounts() {
    let parsed = amounts_from_list(&list(&[
        ("cpu", "1.5"),
        ("memory", "3456Mi"),
        ("kubernetes.io/batch-cpu", "4k"),
        ("kubernetes.io/batch-memory", "4Gi"),
        ("pods", "110"),
    ]))
    .unwrap();
    assert_eq!(
        parsed,
        amounts(&[
            ("cpu", 1500),
            ("memory", 3_623_878_656),
            ("kubernetes.io/batch-cpu", 4000),
            ("kubernetes.io/batch-memory", 4_294_967_296),
            ("pods", 110),
        ])
    );
    let back = amounts_to_list(&parsed);
    assert_eq!(back["cpu"].0, "1500m");
    assert_eq!(back["kubernetes.io/batch-cpu"].0, "4000");
    assert_eq!(amounts_from_list(&back).unwrap(), parsed);
}

#[test]
fn a_bad_entry_names_its_resource() {
    let err = amounts_from_list(&list(&[("cpu", "1"), ("memory", "lots")])).unwrap_err();
    assert_eq!(
        err,
        ResourceError::Quantity {
            resource: "memory".into(),
            source: QuantityError::NotANumber("lots".into())
        }
    );
    assert_eq!(
        err.to_string(),
        "resource memory: quantity \"lots\" is not a number followed by a suffix"
    );
    let err = amounts_from_list(&list(&[("cpu", "9223372036854775807")])).unwrap_err();
    assert!(
        matches!(err, ResourceError::Quantity { ref resource, source: QuantityError::Overflow(_) } if resource == "cpu")
    );
}

#[test]
fn sum_max_and_floored_sub_cover_the_union_of_names() {
    let a = amounts(&[("cpu", 1000), ("memory", 100)]);
    let b = amounts(&[("cpu", 2500), ("pods", 3)]);
    assert_eq!(
        sum_amounts(&a, &b).unwrap(),
        amounts(&[("cpu", 3500), ("memory", 100), ("pods", 3)])
    );
    assert_eq!(
        max_amounts(&a, &b),
        amounts(&[("cpu", 2500), ("memory", 100), ("pods", 3)])
    );
    assert_eq!(
        sub_amounts_floored(&a, &b).unwrap(),
        amounts(&[("cpu", 0), ("memory", 100), ("pods", 0)])
    );
    assert_eq!(
        sub_amounts_floored(&b, &a).unwrap(),
        amounts(&[("cpu", 1500), ("memory", 0), ("pods", 3)])
    );
    let huge = amounts(&[("cpu", i64::MAX)]);
    assert_eq!(
        sum_amounts(&huge, &huge),
        Err(ResourceError::Overflow {
            resource: "cpu".into()
        })
    );
    let negative = amounts(&[("cpu", -1)]);
    assert_eq!(
        sub_amounts_floored(&huge, &negative),
        Err(ResourceError::Overflow {
            resource: "cpu".into()
        })
    );
}

proptest::proptest! {
    #[test]
    fn parse_never_panics(s in "\\PC{0,40}") {
        let _ = ExactQuantity::parse(&s);
    }

    #[test]
    fn quantity_like_strings_never_panic_and_display_round_trips(
        s in "[+-]?[0-9]{0,30}(\\.[0-9]{0,30})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,12})?"
    ) {
        if let Ok(parsed) = ExactQuantity::parse(&s) {
            let again = ExactQuantity::parse(&parsed.to_string()).unwrap();
            proptest::prop_assert_eq!(again, parsed);
            let _ = parsed.milli_value();
            let _ = parsed.value();
        }
    }

    #[test]
    fn milli_value_rounds_the_magnitude_up(nanos in -(1i128 << 80)..(1i128 << 80)) {
        let m = i128::from(ExactQuantity::from_nanos(nanos).unwrap().milli_value().unwrap());
        if nanos >= 0 {
            proptest::prop_assert!(m * NANOS_PER_MILLI >= nanos && (m - 1) * NANOS_PER_MILLI < nanos.max(1));
        } else {
            proptest::prop_assert!(m * NANOS_PER_MILLI <= nanos && (m + 1) * NANOS_PER_MILLI > nanos);
        }
    }
}
