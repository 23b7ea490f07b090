//! The aggregated API's answers as Kubernetes `Table`s (`meta.k8s.io/v1`),
//! which `kubectl get` asks for (`Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io`) and prints as columns:
//! a CronJob's owner, phase, next wake-up, last schedule, active Jobs and
//! suspension; a ring's view; a replica's queues. Each row carries the
//! object's metadata (`PartialObjectMetadata`), from which kubectl takes
//! the NAMESPACE column of `-A`. Pure.

use super::routes::group_version;
use crate::admin::json::{phase, time};
use crate::admin::proto::{GetCronJobResponse, GetQueuesResponse, GetRingResponse};
use serde_json::{Value, json};

/// Whether an `Accept` header asks for a `meta.k8s.io/v1` Table (kubectl
/// lists it first, then v1beta1's, then plain JSON).
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let parameters: Vec<&str> = range.split(';').skip(1).map(str::trim).collect();
        ["as=Table", "g=meta.k8s.io", "v=v1"]
            .iter()
            .all(|wanted| parameters.contains(wanted))
    })
}

/// One column: its name and type as `TableColumnDefinition` has them.
struct Column {
    name: &'static str,
    kind: &'static str,
    description: &'static str,
}

const fn column(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        description,
    }
}

/// A row: the object's name and namespace, and its cells in column order.
pub struct Row {
    name: String,
    namespace: Option<String>,
    cells: Vec<Value>,
}

fn table(columns: &[Column], rows: Vec<Row>) -> Value {
    let definitions: Vec<Value> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": if i == 0 { "name" } else { "" },
                "description": c.description,
                "priority": 0,
            })
        })
        .collect();
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|row| {
            json!({
                "cells": row.cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"name": row.name, "namespace": row.namespace},
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

const NONE: &str = "<none>";

const CRONJOB_COLUMNS: [Column; 7] = [
    column("Name", "string", "The CronJob's name."),
    column("Owner", "string", "The replica whose actor runs it."),
    column(
        "Phase",
        "string",
        "running, or waiting for its previous owner to let go.",
    ),
    column(
        "Next Wake-up",
        "string",
        "The armed wake-up: the next slot (plus the spread offset), or a retry.",
    ),
    column(
        "Last Schedule",
        "string",
        "The last slot started, as its actor holds it.",
    ),
    column("Active", "integer", "Its running Jobs."),
    column("Suspended", "boolean", "spec.suspend."),
];

/// The row of one CronJob's state.
pub fn cronjob_row(namespace: &str, name: &str, state: &GetCronJobResponse) -> Row {
    Row {
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
        cells: vec![
            json!(name),
            json!(state.owner),
            json!(phase(state)),
            json!(time(&state.next_wakeup).unwrap_or_else(|| NONE.to_owned())),
            json!(time(&state.last_schedule_time).unwrap_or_else(|| NONE.to_owned())),
            json!(state.active_jobs.len()),
            json!(state.suspended),
        ],
    }
}

pub fn cronjobs_table(rows: Vec<Row>) -> Value {
    table(&CRONJOB_COLUMNS, rows)
}

const RING_COLUMNS: [Column; 6] = [
    column("Name", "string", "The ring."),
    column(
        "Replica",
        "string",
        "The replica that answered: the ring as it sees it.",
    ),
    column("Phase", "string", "Its phase in the ownership protocol."),
    column("View", "string", "The members of the ring it acts on."),
    column("Running", "integer", "CronJobs whose actors run there."),
    column(
        "Waiting",
        "integer",
        "CronJobs owned there, waiting for their previous owner.",
    ),
];

pub fn ring_table(ring: &GetRingResponse) -> Value {
    let row = Row {
        name: ring.ring.clone(),
        namespace: None,
        cells: vec![
            json!(ring.ring),
            json!(ring.replica),
            json!(ring.phase),
            json!(ring.view.join(",")),
            json!(ring.running),
            json!(ring.waiting),
        ],
    };
    table(&RING_COLUMNS, vec![row])
}

const QUEUE_COLUMNS: [Column; 4] = [
    column("Name", "string", "The replica."),
    column(
        "Rate",
        "number",
        "Its write gateway's rate now, requests a second.",
    ),
    column("Waiting", "integer", "Requests waiting, every class."),
    column(
        "Classes",
        "string",
        "Each class with requests waiting, and how many.",
    ),
];

/// One row for each replica's queues.
pub fn queues_table(replicas: &[GetQueuesResponse]) -> Value {
    let rows = replicas
        .iter()
        .map(|queues| {
            let waiting: u64 = queues.classes.iter().map(|c| c.waiting).sum();
            let classes: Vec<String> = queues
                .classes
                .iter()
                .filter(|c| c.waiting > 0)
                .map(|c| format!("{}={}", c.class, c.waiting))
                .collect();
            Row {
                name: queues.replica.clone(),
                namespace: None,
                cells: vec![
                    json!(queues.replica),
                    json!((queues.rate * 100.0).round() / 100.0),
                    json!(waiting),
                    json!(if classes.is_empty() {
                        NONE.to_owned()
                    } else {
                        classes.join(",")
                    }),
                ],
            }
        })
        .collect();
    table(&QUEUE_COLUMNS, rows)
}

/// A JSON list of `kind` objects (`CronJobStateList`, ...), as `kubectl
/// get -o yaml` asks for it.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({
        "kind": format!("{kind}List"),
        "apiVersion": group_version(),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::proto::ActorPhase;

    #[test]
    fn kubectl_s_accept_header_asks_for_a_v1_table_and_plain_json_does_not() {
        for (accept, table) in [
            (
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
                true,
            ),
            ("application/json; as=Table; g=meta.k8s.io; v=v1", true),
            ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", false),
            ("application/json", false),
            ("application/yaml", false),
            ("", false),
        ] {
            assert_eq!(wants_table(accept), table, "{accept}");
        }
    }

    #[test]
    fn a_cronjob_row_names_its_owner_next_wakeup_and_state_with_its_metadata() {
        let state = GetCronJobResponse {
            owner: "shardcron-1".into(),
            phase: ActorPhase::Running.into(),
            next_wakeup: Some(prost_types::Timestamp {
                seconds: 1_800_000_000,
                nanos: 0,
            }),
            active_jobs: vec!["nightly-29000000".into()],
            ..GetCronJobResponse::default()
        };
        let table = cronjobs_table(vec![cronjob_row("team-a", "nightly", &state)]);
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Owner",
                "Phase",
                "Next Wake-up",
                "Last Schedule",
                "Active",
                "Suspended"
            ]
        );
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        let row = &table["rows"][0];
        assert_eq!(
            row["cells"],
            json!([
                "nightly",
                "shardcron-1",
                "running",
                "2027-01-15T08:00:00Z",
                "<none>",
                1,
                false
            ])
        );
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["metadata"]["namespace"], "team-a");
        assert_eq!(row["object"]["metadata"]["name"], "nightly");
    }

    #[test]
    fn a_ring_and_a_replica_s_queues_are_one_row_each() {
        let ring = GetRingResponse {
            replica: "r0".into(),
            ring: "shardcron".into(),
            phase: "serving".into(),
            view: vec!["r0".into(), "r1".into()],
            running: 5,
            ..GetRingResponse::default()
        };
        assert_eq!(
            ring_table(&ring)["rows"][0]["cells"],
            json!(["shardcron", "r0", "serving", "r0,r1", 5, 0])
        );
        let queues = GetQueuesResponse {
            replica: "r1".into(),
            rate: 19.996,
            classes: vec![
                crate::admin::proto::QueueClass {
                    class: "create".into(),
                    waiting: 2,
                    ..Default::default()
                },
                crate::admin::proto::QueueClass {
                    class: "event".into(),
                    waiting: 0,
                    ..Default::default()
                },
            ],
        };
        let table = queues_table(&[queues]);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["r1", 20.0, 2, "create=2"])
        );
        assert!(table["rows"][0]["object"]["metadata"]["namespace"].is_null());
    }
}
