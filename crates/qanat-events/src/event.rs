//! What happened: an entity and an action (MLflow's webhook vocabulary), validated as
//! a pair, with the example payload a test delivery sends.

use std::fmt;
use std::str::FromStr;

use serde_json::{json, Value};

use crate::{Error, Result};

/// The kind of object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entity {
    RegisteredModel,
    ModelVersion,
    ModelVersionTag,
    ModelVersionAlias,
    /// A monitor's alert rule fired (Qanat's own: MLflow has no monitoring).
    MonitorAlert,
    /// A dataset version holds personal data its dataset does not declare (Qanat's
    /// own).
    UndeclaredPii,
}

/// What happened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Created,
    Updated,
    Deleted,
    Set,
}

const ENTITIES: &[(Entity, &str, i64)] = &[
    (Entity::RegisteredModel, "registered_model", 1),
    (Entity::ModelVersion, "model_version", 2),
    (Entity::ModelVersionTag, "model_version_tag", 3),
    (Entity::ModelVersionAlias, "model_version_alias", 4),
    // Past MLflow's numbers, so a future MLflow entity cannot take it.
    (Entity::MonitorAlert, "monitor_alert", 101),
    (Entity::UndeclaredPii, "undeclared_pii", 102),
];

/// MLflow's entities that Qanat has no counterpart for (prompts, AI-gateway budgets).
const UNSUPPORTED_ENTITIES: &[(&str, i64)] = &[
    ("prompt", 5),
    ("prompt_version", 6),
    ("prompt_tag", 7),
    ("prompt_version_tag", 8),
    ("prompt_alias", 9),
    ("budget_policy", 10),
];

const ACTIONS: &[(Action, &str, i64)] = &[
    (Action::Created, "created", 1),
    (Action::Updated, "updated", 2),
    (Action::Deleted, "deleted", 3),
    (Action::Set, "set", 4),
];

impl Entity {
    /// The lower-case name (`model_version`), as payloads and event names spell it.
    pub fn as_str(self) -> &'static str {
        ENTITIES
            .iter()
            .find(|(e, _, _)| *e == self)
            .map_or("", |(_, s, _)| s)
    }

    /// From MLflow's enum, by name in either case (`MODEL_VERSION`) or number (`2`).
    pub fn parse(v: &Value) -> Result<Entity> {
        let found = match v {
            Value::String(s) => ENTITIES
                .iter()
                .find(|(_, n, _)| n.eq_ignore_ascii_case(s))
                .map(|(e, _, _)| *e)
                .ok_or_else(|| {
                    if UNSUPPORTED_ENTITIES
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case(s))
                    {
                        unsupported(s)
                    } else {
                        Error::invalid(format!("Invalid webhook entity '{s}'"))
                    }
                }),
            Value::Number(n) => {
                let n = n.as_i64().unwrap_or(-1);
                ENTITIES
                    .iter()
                    .find(|(_, _, i)| *i == n)
                    .map(|(e, _, _)| *e)
                    .ok_or_else(
                        || match UNSUPPORTED_ENTITIES.iter().find(|(_, i)| *i == n) {
                            Some((name, _)) => unsupported(name),
                            None => Error::invalid(format!("Invalid webhook entity {n}")),
                        },
                    )
            }
            _ => Err(Error::invalid(
                "Missing value for required parameter 'entity'.",
            )),
        }?;
        Ok(found)
    }
}

fn unsupported(entity: &str) -> Error {
    Error::invalid(format!(
        "Webhook entity '{}' is not supported: Qanat has no prompt registry or AI gateway; subscribe to registered_model, model_version, model_version_tag, model_version_alias, monitor_alert or undeclared_pii events",
        entity.to_ascii_lowercase()
    ))
}

impl Action {
    pub fn as_str(self) -> &'static str {
        ACTIONS
            .iter()
            .find(|(a, _, _)| *a == self)
            .map_or("", |(_, s, _)| s)
    }

    /// From MLflow's enum, by name in either case (`CREATED`) or number (`1`).
    pub fn parse(v: &Value) -> Result<Action> {
        let found = match v {
            Value::String(s) => ACTIONS.iter().find(|(_, n, _)| n.eq_ignore_ascii_case(s)),
            Value::Number(n) => ACTIONS.iter().find(|(_, _, i)| Some(*i) == n.as_i64()),
            _ => {
                return Err(Error::invalid(
                    "Missing value for required parameter 'action'.",
                ))
            }
        };
        found
            .map(|(a, _, _)| *a)
            .ok_or_else(|| Error::invalid(format!("Invalid webhook action {v}")))
    }
}

/// An entity and an action that can happen to it (`model_version.created`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventType {
    entity: Entity,
    action: Action,
}

impl EventType {
    pub const REGISTERED_MODEL_CREATED: EventType =
        EventType::pair(Entity::RegisteredModel, Action::Created);
    pub const MODEL_VERSION_CREATED: EventType =
        EventType::pair(Entity::ModelVersion, Action::Created);
    pub const MODEL_VERSION_TAG_SET: EventType =
        EventType::pair(Entity::ModelVersionTag, Action::Set);
    pub const MODEL_VERSION_TAG_DELETED: EventType =
        EventType::pair(Entity::ModelVersionTag, Action::Deleted);
    pub const MODEL_VERSION_ALIAS_CREATED: EventType =
        EventType::pair(Entity::ModelVersionAlias, Action::Created);
    pub const MODEL_VERSION_ALIAS_DELETED: EventType =
        EventType::pair(Entity::ModelVersionAlias, Action::Deleted);
    pub const MONITOR_ALERT_CREATED: EventType =
        EventType::pair(Entity::MonitorAlert, Action::Created);
    pub const UNDECLARED_PII_CREATED: EventType =
        EventType::pair(Entity::UndeclaredPii, Action::Created);

    /// Every event a webhook can subscribe to.
    pub const ALL: [EventType; 8] = [
        Self::REGISTERED_MODEL_CREATED,
        Self::MODEL_VERSION_CREATED,
        Self::MODEL_VERSION_TAG_SET,
        Self::MODEL_VERSION_TAG_DELETED,
        Self::MODEL_VERSION_ALIAS_CREATED,
        Self::MODEL_VERSION_ALIAS_DELETED,
        Self::MONITOR_ALERT_CREATED,
        Self::UNDECLARED_PII_CREATED,
    ];

    const fn pair(entity: Entity, action: Action) -> EventType {
        EventType { entity, action }
    }

    /// The pair, refused in MLflow's words when the entity has no such action.
    pub fn new(entity: Entity, action: Action) -> Result<EventType> {
        let e = EventType { entity, action };
        if Self::ALL.contains(&e) {
            return Ok(e);
        }
        let mut valid: Vec<&str> = Self::ALL
            .iter()
            .filter(|t| t.entity == entity)
            .map(|t| t.action.as_str())
            .collect();
        valid.sort_unstable();
        Err(Error::invalid(format!(
            "Invalid action '{}' for entity '{}'. Valid actions are: {valid:?}",
            action.as_str(),
            entity.as_str()
        )))
    }

    pub fn entity(self) -> Entity {
        self.entity
    }

    pub fn action(self) -> Action {
        self.action
    }

    /// MLflow's wire form: `{"entity": "MODEL_VERSION", "action": "CREATED"}`.
    pub fn to_mlflow(self) -> Value {
        json!({
            "entity": self.entity.as_str().to_ascii_uppercase(),
            "action": self.action.as_str().to_ascii_uppercase(),
        })
    }

    /// From MLflow's wire form.
    pub fn from_mlflow(v: &Value) -> Result<EventType> {
        let entity = Entity::parse(v.get("entity").unwrap_or(&Value::Null))?;
        let action = Action::parse(v.get("action").unwrap_or(&Value::Null))?;
        EventType::new(entity, action)
    }

    /// What a test delivery of this event carries (MLflow's examples).
    pub fn example(self) -> Value {
        match (self.entity, self.action) {
            (Entity::RegisteredModel, _) => json!({
                "name": "example_model",
                "tags": {"example_key": "example_value"},
                "description": "An example registered model",
            }),
            (Entity::ModelVersion, _) => json!({
                "name": "example_model",
                "version": "1",
                "source": "models:/123",
                "run_id": "abcd1234abcd5678",
                "tags": {"example_key": "example_value"},
                "description": "An example model version",
            }),
            (Entity::ModelVersionTag, Action::Set) => json!({
                "name": "example_model", "version": "1",
                "key": "example_key", "value": "example_value",
            }),
            (Entity::ModelVersionTag, _) => json!({
                "name": "example_model", "version": "1", "key": "example_key",
            }),
            (Entity::ModelVersionAlias, Action::Created) => json!({
                "name": "example_model", "alias": "example_alias", "version": "1",
            }),
            (Entity::ModelVersionAlias, _) => json!({
                "name": "example_model", "alias": "example_alias",
            }),
            (Entity::MonitorAlert, _) => json!({
                "deployment": "example_deployment",
                "alert": 1,
                "rule": "drift",
                "condition": "drift_share > 0.3 in 2 consecutive windows",
                "metric": "drift_share",
                "value": 0.4,
                "model": "example_model",
                "version": "1",
                "check": 7,
                "actions": ["notify", "retrain"],
            }),
            (Entity::UndeclaredPii, _) => json!({
                "dataset": "example_dataset",
                "version": 3,
                "author": "example_user",
                "columns": [{"file": "customers.csv", "column": "email", "kinds": ["email"], "share": 1.0}],
            }),
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.entity.as_str(), self.action.as_str())
    }
}

impl FromStr for EventType {
    type Err = Error;

    /// `model_version.created`.
    fn from_str(s: &str) -> Result<EventType> {
        let (e, a) = s.split_once('.').ok_or_else(|| {
            Error::invalid(format!(
                "Invalid event string format: {s}. Expected 'entity.action'"
            ))
        })?;
        EventType::new(
            Entity::parse(&Value::String(e.into()))?,
            Action::parse(&Value::String(a.into()))?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_round_trip_and_invalid_pairs_are_refused() {
        for e in EventType::ALL {
            assert_eq!(e.to_string().parse::<EventType>().expect("parses"), e);
            assert_eq!(EventType::from_mlflow(&e.to_mlflow()).expect("parses"), e);
        }
        let err = "registered_model.deleted"
            .parse::<EventType>()
            .expect_err("no such pair");
        assert!(
            err.to_string().contains("Valid actions are: [\"created\"]"),
            "{err}"
        );
        let err = EventType::from_mlflow(&json!({"entity": "PROMPT", "action": "CREATED"}))
            .expect_err("prompts are not ours");
        assert!(err.to_string().contains("not supported"), "{err}");
        assert_eq!(
            EventType::from_mlflow(&json!({"entity": 2, "action": 1})).expect("numbers"),
            EventType::MODEL_VERSION_CREATED
        );
    }
}
