//! The deploy API against its contract, tried as a user would try it:
//! schemathesis (installed by `hack/schemathesis.sh`, pinned) generates
//! requests from `docs/deploy-api.openapi.yaml` — valid ones and ones that
//! break the schema, every operation, the grant links followed
//! (renew/watch/release with a real token) — and sends them to a real
//! operator with a real caller's token. Half of the requests name the real
//! group (and `counter-app` as the instance), so they reach the lease
//! store; the other half name generated groups.
//!
//! Zero findings is the bar: no server error, no status or body outside the
//! contract, no valid request refused with 400 (the contract states every
//! constraint the server enforces), no invalid one accepted, 401 without
//! credentials, 405 (with `Allow`) for other methods.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test: a failed step fails the test

use std::process::Command;
use std::time::Duration;

use bloodraven_e2e::deploy::{self, Pipeline};
use bloodraven_e2e::fixtures::Scenario;
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;

/// Generated requests per operation in the fuzzing phase. With the
/// coverage phase's own cases and the stateful phase this makes about 4,000
/// requests, a minute and a half against a debug-build operator on two
/// cores (1,000 made 10,713 in 230 s, also at zero findings: a third of the
/// whole suite's time for little more).
const MAX_EXAMPLES: u32 = 350;

/// The seed, so a finding can be replayed (`st run … --seed 20260909`).
const SEED: u64 = 20_260_909;

/// The `st` executable: `BLOODRAVEN_SCHEMATHESIS`, set by `hack/e2e.sh`
/// after `hack/schemathesis.sh` installed it.
fn schemathesis() -> String {
    std::env::var("BLOODRAVEN_SCHEMATHESIS").unwrap_or_else(|_| {
        panic!("BLOODRAVEN_SCHEMATHESIS is not set: run the e2e tests through hack/e2e.sh, which installs schemathesis")
    })
}

#[tokio::test]
async fn the_deploy_api_keeps_its_contract_under_a_schema_driven_fuzzer() {
    let st = schemathesis();
    // Leader timings with room to spare: a leader that lost its Lease under
    // load would answer 503 not_leader, which is a server error to the fuzzer.
    let timings = LeaderTimings { lease_duration: 30, renew_deadline: 25, retry_period: 5 };
    let sc = Scenario::start("fuzz", 0, timings).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let (op, base) = deploy::start_operator(&sc.cluster, &sc.ns, "op", &tls, timings).await;
    let group = sc.bootstrapped_group("g").await;
    deploy::service_account(&sc.cluster, &sc.ns.name, "deployer").await;
    deploy::database(&sc.cluster, &sc.ns.name, "counter-app", &group, &[(&sc.ns.name, "deployer")]).await;
    let token = deploy::token(&sc.cluster, &sc.ns.name, "deployer", &["bloodraven-deploy"]).await;
    let p = Pipeline { http: deploy::client(&tls.ca), base: base.clone(), group: group.clone(), token: token.clone() };
    wait_for("the caller to be authorized", Duration::from_secs(60), || async {
        let r = p.get().await;
        if r.status == 200 { Ok(()) } else { Err(format!("{r:?}")) }
    })
    .await;

    let dir = sc.pair.dir().join("fuzz");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[headers]
Authorization = "Bearer ${{BLOODRAVEN_FUZZ_TOKEN}}"

[dictionaries.groups]
values = ["{group}"]

[dictionaries.instances]
values = ["counter-app"]

[parameters]
"path.group" = {{ dictionary = "groups", probability = 0.5 }}
"body.instance" = {{ dictionary = "instances", probability = 0.5 }}
"#
        ),
    )
    .unwrap();
    let origin = base.trim_end_matches("/deploy/v1");
    let contract = bloodraven_e2e::repo_root().join("docs/deploy-api.openapi.yaml");
    let output = Command::new(&st)
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(&contract)
        .args(["--url", origin, "--tls-verify"])
        .arg(&tls.ca)
        .args(["--checks", "all", "--max-examples", &MAX_EXAMPLES.to_string(), "--seed", &SEED.to_string()])
        // Every resource the API creates is a lease with a TTL (5 s at the
        // least): one the stateful phase created may rightly be `404
        // expired` by the time a later step asks for it on a loaded
        // machine, which this check takes for a lost resource. That a live
        // lease answers every call is deploy_api.rs's (each row of the
        // reference table) and deploy_watch.rs's.
        .args(["--exclude-checks", "ensure_resource_availability"])
        .args(["--workers", "1", "--request-timeout", "70", "--no-color", "--report", "junit", "--report-dir"])
        .arg(dir.join("report"))
        .env("BLOODRAVEN_FUZZ_TOKEN", &token)
        .current_dir(&dir)
        .output()
        .expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    std::fs::write(dir.join("output.txt"), format!("{stdout}\n{stderr}")).unwrap();
    let summary = stdout.rsplit("SUMMARY").next().unwrap_or_default();
    println!("schemathesis summary:{summary}");
    assert!(
        output.status.success(),
        "schemathesis found the server outside its contract (exit {:?}); full output in {}:\n{}\n{stderr}",
        output.status.code(),
        dir.join("output.txt").display(),
        tail(&stdout, 200)
    );
    // It did test: every operation, thousands of cases.
    assert!(summary.contains("Tested: 5"), "not every operation was tested:{summary}");
    // "Test cases:" is followed by "<n> generated, …".
    let cases = summary
        .lines()
        .find(|l| l.contains(" generated"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok());
    // A floor against a run that silently tested little, not a target: the
    // seeded run made 3,000+ cases before renewals gained the optional
    // `revision`, and 1,897 (zero findings) after.
    assert!(cases.is_some_and(|n| n >= 1500), "too few test cases ({cases:?}):{summary}");
    drop(op);
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
