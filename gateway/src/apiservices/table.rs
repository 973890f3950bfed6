//! The Table kubectl asks for (`kubectl get apiservices`): NAME, SERVICE, AVAILABLE, AGE, as
//! kube-apiserver prints them.

use serde_json::{json, Value};

/// Whether `Accept` asks for a `meta.k8s.io` Table.
pub fn wanted(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn service(object: &Value) -> String {
    let svc = &object["spec"]["service"];
    match (svc["namespace"].as_str(), svc["name"].as_str()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        _ => "Local".into(),
    }
}

fn available(object: &Value) -> String {
    let conditions = object["status"]["conditions"].as_array();
    let Some(c) = conditions.and_then(|cs| cs.iter().find(|c| c["type"] == "Available")) else {
        return "Unknown".into();
    };
    match (
        c["status"].as_str().unwrap_or("Unknown"),
        c["reason"].as_str(),
    ) {
        ("True", _) => "True".into(),
        (s, Some(reason)) if !reason.is_empty() => format!("{s} ({reason})"),
        (s, _) => s.into(),
    }
}

/// kubectl's short age (`5s`, `3m`, `2d`).
fn age(created: Option<&str>) -> String {
    let Some(t) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The Table of `objects`.
pub fn table(objects: &[Value], metadata: Value) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let meta = &o["metadata"];
            json!({
                "cells": [meta["name"], service(o), available(o), age(meta["creationTimestamp"].as_str())],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta},
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
            {"name": "Service", "type": "string", "format": "", "description": "The reference to the service that hosts this API endpoint.", "priority": 0},
            {"name": "Available", "type": "string", "format": "", "description": "Whether this service is available.", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp of the object.", "priority": 0}
        ],
        "rows": rows,
    })
}
