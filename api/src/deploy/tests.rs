use super::*;

#[test]
fn operation_ids() {
    for ok in ["a", "a1c3f0e2-77", "deploy:42.retry_1", "...", ".a", &"x".repeat(128)] {
        assert!(valid_operation_id(ok), "{ok}");
    }
    for bad in ["", "has space", "slash/no", "ünï", &"x".repeat(129), "semi;colon", ".", ".."] {
        assert!(!valid_operation_id(bad), "{bad}");
    }
}

#[test]
fn names_and_tokens() {
    for ok in ["playground", "counter-app", "a.b", "0", &"a".repeat(253)] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in ["", "-a", "a-", "UPPER", "a_b", ".a", "a.", &"a".repeat(254)] {
        assert!(!valid_name(bad), "{bad}");
    }
    assert!(valid_token("t") && valid_token(&"é".repeat(512)), "the bound counts characters, as JSON Schema does");
    assert!(!valid_token("") && !valid_token(&"t".repeat(513)));
}

#[test]
fn ttl_is_clamped() {
    assert_eq!(clamp_ttl(0), 5);
    assert_eq!(clamp_ttl(30), 30);
    assert_eq!(clamp_ttl(10_000), 120);
}

#[test]
fn kinds_states_and_unknown_fields() {
    let req: CreateLeaseRequest =
        serde_json::from_str(r#"{"kind":"failover-hold","operationId":"x","instance":"i","ttlSeconds":30}"#).unwrap();
    assert_eq!(req.kind, LeaseKind::FailoverHold);
    assert!(
        serde_json::from_str::<CreateLeaseRequest>(
            r#"{"kind":"other","operationId":"x","instance":"i","ttlSeconds":30}"#
        )
        .is_err()
    );
    assert!(serde_json::from_str::<RenewRequest>(r#"{"token":"t","extra":1}"#).is_err());
    assert!(serde_json::from_str::<WatchRequest>(r#"{"token":"t","waitSeconds":5,"x":1}"#).is_err());
    for k in LeaseKind::ALL {
        assert_eq!(LeaseKind::parse(k.as_str()), Some(k));
        assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
    }
    for d in [DdlState::Before, DdlState::Started, DdlState::Completed, DdlState::Failed] {
        assert_eq!(DdlState::parse(d.as_str()), Some(d));
        assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
    }
}

/// The contract's string shapes and the server's checks are one rule: a
/// table of values, each checked by the generated schema and by the server.
#[test]
fn the_contract_shapes_are_the_servers_checks() {
    let validator = |schema: schemars::Schema| jsonschema::validator_for(&schema.to_value()).unwrap();
    let op = validator(schemars::schema_for!(schema::OperationId));
    let name = validator(schemars::schema_for!(schema::ResourceName));
    let token = validator(schemars::schema_for!(schema::LeaseToken));
    let revision = validator(schemars::schema_for!(schema::Revision));
    let values = [
        "",
        "a",
        "A",
        "a.b",
        "a..b",
        ".",
        "..",
        "...",
        "-a",
        "a-",
        "a_b",
        "a:b",
        "a/b",
        "a b",
        "ünï",
        "0",
        "a\n",
        &"x".repeat(64),
        &"x".repeat(65),
        &"x".repeat(128),
        &"x".repeat(129),
        &"x".repeat(253),
        &"x".repeat(254),
        &"é".repeat(512),
        &"é".repeat(513),
    ];
    for v in values {
        let j = serde_json::Value::String(v.to_owned());
        assert_eq!(op.is_valid(&j), valid_operation_id(v), "operationId {v:?}");
        assert_eq!(name.is_valid(&j), valid_name(v), "name {v:?}");
        assert_eq!(token.is_valid(&j), valid_token(v), "token {v:?}");
        assert_eq!(revision.is_valid(&j), valid_revision(v), "revision {v:?}");
    }
}

#[cfg(feature = "crd")]
#[test]
fn the_document_is_built_and_names_every_code_once() {
    let doc = serde_json::to_value(openapi::document().unwrap()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in ["ErrorBody", "ErrorCode", "RevokeReason", "GroupView", "PlannedFailoverPhase", "OperationId"] {
        assert!(schemas.contains_key(name), "{name} in {:?}", schemas.keys().collect::<Vec<_>>());
    }
    let text = doc.to_string();
    for code in ErrorCode::ALL {
        assert!(text.contains(&format!("\"{}\"", code.as_str())), "{code} is in the contract");
    }
    // Every $ref resolves.
    for r in text.split("\"$ref\":\"").skip(1).map(|s| &s[..s.find('"').unwrap()]) {
        assert!(doc.pointer(r.trim_start_matches('#')).is_some(), "dangling {r}");
    }
    for op in &openapi::OPERATIONS {
        let o = &doc["paths"][op.path][op.method.key()];
        assert_eq!(o["operationId"], op.id);
        for code in op.errors {
            let r = &o["responses"][code.status().to_string()];
            let enumerated = &r["content"]["application/json"]["schema"]["properties"]["error"]["enum"];
            assert!(enumerated.as_array().unwrap().contains(&code.as_str().into()), "{} {code}", op.id);
        }
    }
}

/// `integer` in the contract is JSON Schema's: a number with no fractional
/// part, `30.0` included (schemathesis sent one and got a 400).
#[test]
fn whole_numbers_are_read_as_the_contract_says() {
    let ttl = |v: &str| {
        serde_json::from_str::<CreateLeaseRequest>(&format!(
            r#"{{"kind":"migration","operationId":"x","instance":"i","ttlSeconds":{v}}}"#
        ))
        .map(|r| r.ttl_seconds)
    };
    for (v, want) in [("30", 30), ("30.0", 30), ("3e1", 30), ("0", 0), ("-0.0", 0), ("4294967295.0", u32::MAX)] {
        assert_eq!(ttl(v).unwrap(), want, "{v}");
    }
    for v in ["30.5", "-1", "4294967296", "1e300", "\"30\"", "null", "true"] {
        assert!(ttl(v).is_err(), "{v}");
    }
    let wait = |v: &str| {
        serde_json::from_str::<WatchRequest>(&format!(r#"{{"token":"t","waitSeconds":{v}}}"#)).map(|r| r.wait_seconds)
    };
    assert_eq!(wait("43.0").unwrap(), Some(43));
    assert_eq!(wait("null").unwrap(), None);
    assert!(wait("1.5").is_err());
    assert_eq!(serde_json::from_str::<WatchRequest>(r#"{"token":"t"}"#).unwrap().wait_seconds, None);
}
