//! The deploy API's OpenAPI 3.1 document, generated from the wire types and
//! from [`OPERATIONS`], the table of what each operation accepts and every
//! status it can answer. `cargo xtask openapi` writes it to
//! `docs/deploy-api.openapi.yaml`; `cargo xtask openapi --check` (in `make
//! check`) fails when the file differs, so the contract never drifts from
//! the types. The e2e tests check every answer of the real server against
//! the file, and run a schema-driven fuzzer (schemathesis) against it.
//!
//! Schemas come from `schemars` (JSON Schema 2020-12, which OpenAPI 3.1
//! uses): request bodies as the server reads them (unknown fields refused),
//! answers as the server writes them (exactly the fields it sends).

use schemars::generate::{Contract, SchemaGenerator, SchemaSettings};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    CreateLeaseRequest, ErrorBody, ErrorCode, GroupView, LeaseGrant, LeaseKind, MAX_BODY_BYTES, ReleaseRequest,
    RenewRequest, RenewResponse, WatchRequest, WatchResponse, schema,
};

/// Where the generated schemas live in the document.
const COMPONENTS: &str = "#/components/schemas";

/// An HTTP method of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
}

impl Method {
    /// The method as OpenAPI keys it (`get`).
    pub const fn key(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
            Method::Put => "put",
            Method::Delete => "delete",
        }
    }
}

/// A request or answer body of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// [`CreateLeaseRequest`].
    CreateLease,
    /// [`RenewRequest`].
    Renew,
    /// [`ReleaseRequest`].
    Release,
    /// [`WatchRequest`].
    Watch,
    /// [`GroupView`].
    Group,
    /// [`LeaseGrant`].
    Grant,
    /// [`RenewResponse`].
    Renewed,
    /// [`WatchResponse`].
    Watched,
}

impl Body {
    fn schema(self, requests: &mut SchemaGenerator, answers: &mut SchemaGenerator) -> Value {
        let schema = match self {
            Body::CreateLease => requests.subschema_for::<CreateLeaseRequest>(),
            Body::Renew => requests.subschema_for::<RenewRequest>(),
            Body::Release => requests.subschema_for::<ReleaseRequest>(),
            Body::Watch => requests.subschema_for::<WatchRequest>(),
            Body::Group => answers.subschema_for::<GroupView>(),
            Body::Grant => answers.subschema_for::<LeaseGrant>(),
            Body::Renewed => answers.subschema_for::<RenewResponse>(),
            Body::Watched => answers.subschema_for::<WatchResponse>(),
        };
        schema.to_value()
    }
}

/// A success answer of an operation: status, what it means, its body.
#[derive(Clone, Copy, Debug)]
pub struct Success {
    /// HTTP status.
    pub status: u16,
    /// What it means.
    pub description: &'static str,
    /// The body (`None`: no body).
    pub body: Option<Body>,
}

/// One operation: where it is, what it takes, and every answer it can give.
#[derive(Clone, Copy, Debug)]
pub struct Operation {
    /// `operationId` in the document.
    pub id: &'static str,
    /// HTTP method.
    pub method: Method,
    /// Path template (below the server URL).
    pub path: &'static str,
    /// One line.
    pub summary: &'static str,
    /// More, when there is more to say.
    pub description: &'static str,
    /// The request body (required when present).
    pub request: Option<Body>,
    /// Success answers.
    pub success: &'static [Success],
    /// Every refusal the server can answer for this operation (the status is
    /// the code's: [`ErrorCode::status`]).
    pub errors: &'static [ErrorCode],
}

/// The path of a group.
pub const GROUP_PATH: &str = "/deploy/v1/groups/{group}";
/// The path of a group's leases.
pub const LEASES_PATH: &str = "/deploy/v1/groups/{group}/leases";
/// The path of one lease.
pub const LEASE_PATH: &str = "/deploy/v1/groups/{group}/leases/{kind}/{operationId}";
/// The path of a watch on one lease.
pub const WATCH_PATH: &str = "/deploy/v1/groups/{group}/leases/{kind}/{operationId}/watch";

use ErrorCode as E;

/// Refusals every operation can give: a bad path parameter, no or a bad
/// token, a caller that may not act in the group (or a group that does not
/// exist, told only to a caller that a MysqlDatabase naming it lists), a
/// path that routes nowhere (an empty parameter; a `.` or `..` one, which
/// clients remove before sending) or to another method, a failure inside,
/// not the leader, a TokenReview that failed.
const COMMON: [ErrorCode; 9] = [
    E::InvalidRequest,
    E::Unauthenticated,
    E::Forbidden,
    E::GroupNotFound,
    E::NotFound,
    E::MethodNotAllowed,
    E::Internal,
    E::NotLeader,
    E::ReviewFailed,
];

/// Every operation of the API.
pub const OPERATIONS: [Operation; 5] = [
    Operation {
        id: "getGroup",
        method: Method::Get,
        path: GROUP_PATH,
        summary: "Observe a group: active site, generation, stability, health, operations in flight, live leases.",
        description: "An observation: it changes nothing.",
        request: None,
        success: &[Success { status: 200, description: "The group.", body: Some(Body::Group) }],
        errors: &COMMON,
    },
    Operation {
        id: "createLease",
        method: Method::Post,
        path: LEASES_PATH,
        summary: "Take the migration mutex, then the failover-hold (same operationId and instance).",
        description: "The migration lease is the mutex: one per group. The failover-hold is granted only to the \
            current migration holder with the same operationId and instance (else 403). Repeating the POST of the \
            holder's operationId answers 200 with a new token and invalidates the old one: serialise it with \
            renewals. A revoked operationId answers 409 revoked until the group is deleted. A new migration \
            lease for an instance whose schema awaits a person's verification (an earlier operation ended \
            after its DDL started) answers 409 schema_verification_required until the group's \
            schema-verified annotation clears it.",
        request: Some(Body::CreateLease),
        success: &[
            Success { status: 201, description: "Granted.", body: Some(Body::Grant) },
            Success {
                status: 200,
                description: "A repeat of the holder's operationId: the token was rotated, the old one no longer works.",
                body: Some(Body::Grant),
            },
        ],
        errors: &[
            E::InvalidRequest,
            E::Unauthenticated,
            E::Forbidden,
            E::GroupNotFound,
            E::NotFound,
            E::MethodNotAllowed,
            E::RequestTimeout,
            E::Held,
            E::Revoked,
            E::SchemaVerificationRequired,
            E::PayloadTooLarge,
            E::Unstable,
            E::TooManyRequests,
            E::Internal,
            E::NotLeader,
            E::ReviewFailed,
            E::Contention,
        ],
    },
    Operation {
        id: "renewLease",
        method: Method::Put,
        path: LEASE_PATH,
        summary: "Renew every ttl/3; compare the returned topologyGeneration with the grant's every time.",
        description: "409 revoked, 404 expired and 403 token_mismatch all mean the same thing: authority is gone. \
            Stop the heartbeat and never reconnect to a new primary. 423 unstable is not a renewal: the deadline \
            did not move.",
        request: Some(Body::Renew),
        success: &[Success { status: 200, description: "Renewed.", body: Some(Body::Renewed) }],
        errors: &[
            E::InvalidRequest,
            E::Unauthenticated,
            E::Forbidden,
            E::TokenMismatch,
            E::GroupNotFound,
            E::NotFound,
            E::Expired,
            E::MethodNotAllowed,
            E::RequestTimeout,
            E::Revoked,
            E::PayloadTooLarge,
            E::Unstable,
            E::TooManyRequests,
            E::Internal,
            E::NotLeader,
            E::ReviewFailed,
            E::Contention,
        ],
    },
    Operation {
        id: "releaseLease",
        method: Method::Delete,
        path: LEASE_PATH,
        summary: "Release; releasing the migration mutex also releases that operation's failover-hold.",
        description: "Release the hold on every failure path; release the mutex only after the deploy's outcome is recorded.",
        request: Some(Body::Release),
        success: &[Success { status: 204, description: "Released.", body: None }],
        errors: &[
            E::InvalidRequest,
            E::Unauthenticated,
            E::Forbidden,
            E::TokenMismatch,
            E::GroupNotFound,
            E::NotFound,
            E::Expired,
            E::MethodNotAllowed,
            E::RequestTimeout,
            E::Revoked,
            E::PayloadTooLarge,
            E::TooManyRequests,
            E::Internal,
            E::NotLeader,
            E::ReviewFailed,
            E::Contention,
        ],
    },
    Operation {
        id: "watchLease",
        method: Method::Post,
        path: WATCH_PATH,
        summary: "Long-poll: answer as soon as the lease is no longer the caller's, or when the wait runs out.",
        description: "Push revocation. The answer comes within milliseconds of the operator revoking the lease \
            (409 revoked), of its release or lapse (404 expired), or of a repeated POST rotating the token \
            (403 token_mismatch); otherwise after waitSeconds (default 30, at most 60) with 200 and the lease as \
            last renewed. Renewals stay the source of truth: a watch never extends a lease, and a watch that \
            fails (connection lost, 503, 429) changes nothing about the deadline; ask again. The token travels in \
            the body, never in the URL. At most 4 watches per lease are open at once (429 too_many_watches \
            beyond), and the operator bounds all watches to half its connection limit.",
        request: Some(Body::Watch),
        success: &[Success {
            status: 200,
            description: "The wait ran out and the lease is still the caller's (not a renewal).",
            body: Some(Body::Watched),
        }],
        errors: &[
            E::InvalidRequest,
            E::Unauthenticated,
            E::Forbidden,
            E::TokenMismatch,
            E::GroupNotFound,
            E::NotFound,
            E::Expired,
            E::MethodNotAllowed,
            E::RequestTimeout,
            E::Revoked,
            E::PayloadTooLarge,
            E::TooManyWatches,
            E::TooManyRequests,
            E::Internal,
            E::NotLeader,
            E::ReviewFailed,
        ],
    },
];

/// The document, with its top-level keys in the usual order.
#[derive(Clone, Debug, Serialize)]
pub struct Document {
    /// `3.1.0`.
    pub openapi: Value,
    /// Title, version, description.
    pub info: Value,
    /// The in-cluster address.
    pub servers: Value,
    /// Bearer token for every operation.
    pub security: Value,
    /// Paths and operations.
    pub paths: Value,
    /// Schemas, parameters, security scheme.
    pub components: Value,
}

fn generator(contract: Contract) -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = COMPONENTS.into();
            s.meta_schema = None;
            s.contract = contract;
        })
        .into_generator()
}

const DESCRIPTION: &str = "A group-wide migration mutex and a renewable failover-hold for deploy pipelines, \
fenced by the group's topology generation. It does not run migrations, hands out no MySQL credentials and \
never delays an emergency failover. Served by the leader operator only (a follower answers 503 not_leader), \
over TLS 1.2 or 1.3 on :8443, HTTP/1.1 only; never on the plain port.\n\n\
Callers authenticate with a projected ServiceAccount token for audience `bloodraven-deploy` (checked by a \
TokenReview) and are authorized by `MysqlDatabase.spec.deploymentClients`; a lease acts only for the caller \
it was granted to.\n\n\
Every refusal is `{\"error\": \"<code>\", \"message\": \"...\"}` plus the fields its code carries; each code \
has one status (ErrorCode). Every 4xx and 5xx answer closes its connection. Request bodies are JSON of at \
most 65536 bytes, read within 10 s. The listener itself answers 431 (no body) to a request head over 128 KiB.\n\n\
Generated from the Rust types of bloodraven-api by `cargo xtask openapi`; do not edit.";

/// Builds the document. Fails only when two types of the same schema name
/// generate different schemas (a request type and an answer type that
/// should be one).
pub fn document() -> Result<Document, String> {
    let mut requests = generator(Contract::Deserialize);
    let mut answers = generator(Contract::Serialize);
    let group = requests.subschema_for::<schema::ResourceName>().to_value();
    let kind = requests.subschema_for::<LeaseKind>().to_value();
    let operation_id = requests.subschema_for::<schema::OperationId>().to_value();
    let error = answers.subschema_for::<ErrorBody>().to_value();
    let mut paths = Map::new();
    for op in &OPERATIONS {
        let item = paths.entry(op.path).or_insert_with(|| {
            let mut parameters = vec![json!({"$ref": "#/components/parameters/group"})];
            if op.path.contains("{kind}") {
                parameters.push(json!({"$ref": "#/components/parameters/kind"}));
                parameters.push(json!({"$ref": "#/components/parameters/operationId"}));
            }
            json!({"parameters": parameters})
        });
        item[op.method.key()] = operation(op, &mut requests, &mut answers, &error);
    }
    let mut schemas = requests.take_definitions(true);
    for (name, schema) in answers.take_definitions(true) {
        match schemas.get(&name) {
            // One name, one schema: a type used both ways must read the same.
            Some(existing) if *existing != schema => {
                return Err(format!("schema {name} reads differently in requests and in answers"));
            }
            _ => {
                schemas.insert(name, schema);
            }
        }
    }
    Ok(Document {
        openapi: json!("3.1.0"),
        info: json!({"title": "Bloodraven deploy API", "version": "v1", "description": DESCRIPTION}),
        servers: json!([{"url": "https://bloodraven.bloodraven.svc:8443"}]),
        security: json!([{"serviceAccountToken": []}]),
        paths: Value::Object(paths),
        components: json!({
            "securitySchemes": {"serviceAccountToken": {
                "type": "http", "scheme": "bearer",
                "description": "A projected ServiceAccount token with audience bloodraven-deploy, checked by a TokenReview.",
            }},
            "parameters": {
                "group": {"name": "group", "in": "path", "required": true, "description": "The MysqlFailoverGroup's name.", "schema": group},
                "kind": {"name": "kind", "in": "path", "required": true, "description": "The lease kind.", "schema": kind},
                "operationId": {"name": "operationId", "in": "path", "required": true, "description": "The deploy operation's id.", "schema": operation_id},
            },
            "schemas": schemas,
        }),
    })
}

/// What a client does with a grant (OpenAPI links, which stateful testing
/// follows): renew it, watch it (a look that answers at once) and release it
/// with the token it carries.
fn grant_links() -> Value {
    let parameters = json!({
        "group": "$request.path.group",
        "kind": "$response.body#/kind",
        "operationId": "$response.body#/operationId",
    });
    json!({
        "RenewTheGrant": {
            "operationId": "renewLease",
            "parameters": parameters,
            "requestBody": {"token": "$response.body#/token"},
        },
        "WatchTheGrant": {
            "operationId": "watchLease",
            "parameters": parameters,
            "requestBody": {"token": "$response.body#/token", "waitSeconds": 0},
        },
        "ReleaseTheGrant": {
            "operationId": "releaseLease",
            "parameters": parameters,
            "requestBody": {"token": "$response.body#/token"},
        },
    })
}

/// One operation object: its request body, success answers and every
/// refusal status, each with the codes it can carry.
fn operation(op: &Operation, requests: &mut SchemaGenerator, answers: &mut SchemaGenerator, error: &Value) -> Value {
    let mut out = json!({"operationId": op.id, "summary": op.summary, "description": op.description});
    if let Some(body) = op.request {
        out["requestBody"] = json!({
            "required": true,
            "description": format!("JSON, at most {MAX_BODY_BYTES} bytes."),
            "content": {"application/json": {"schema": body.schema(requests, answers)}},
        });
    }
    let mut responses = Map::new();
    for s in op.success {
        let mut r = json!({"description": s.description});
        if let Some(body) = s.body {
            r["content"] = json!({"application/json": {"schema": body.schema(requests, answers)}});
        }
        if s.body == Some(Body::Grant) {
            r["links"] = grant_links();
        }
        responses.insert(s.status.to_string(), r);
    }
    let mut statuses: Vec<u16> = op.errors.iter().map(|c| c.status()).collect();
    statuses.sort_unstable();
    statuses.dedup();
    for status in statuses {
        let codes: Vec<ErrorCode> = op.errors.iter().copied().filter(|c| c.status() == status).collect();
        let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        let description = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        responses.insert(
            status.to_string(),
            json!({
                "description": description,
                "content": {"application/json": {"schema": {
                    "allOf": [error],
                    "properties": {"error": {"enum": names}},
                }}},
            }),
        );
    }
    responses.insert(
        "431".into(),
        json!({"description": "The request head is over 128 KiB: answered by the listener, with no body."}),
    );
    out["responses"] = Value::Object(responses);
    out
}
