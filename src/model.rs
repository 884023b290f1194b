//! The closed set of task runtimes a job can run under.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which threading model runs a job's tasks.
///
/// # Examples
///
/// ```
/// use streamtask::Model;
///
/// assert_eq!("bridge".parse::<Model>().unwrap(), Model::Bridge);
/// assert_eq!(Model::Legacy.to_string(), "legacy");
/// assert!("actor".parse::<Model>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// The checkpoint-lock model (Flink up to 1.9): sources loop on the task thread under the
    /// lock; timers and checkpoint triggers take the same lock from their own threads.
    Legacy,
    /// The mailbox model (Flink 1.10+): one thread per task runs mails and input steps; sources
    /// are new-style readers.
    Mailbox,
    /// Mailbox tasks, with legacy sources kept on their own thread under the checkpoint lock.
    Bridge,
}

impl Model {
    /// Every model, in the order `compare` runs them.
    pub const ALL: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Model::Legacy => "legacy",
            Model::Mailbox => "mailbox",
            Model::Bridge => "bridge",
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A model name that is not `legacy`, `mailbox` or `bridge`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown model {0:?}; use legacy, mailbox or bridge")]
pub struct UnknownModel(pub String);

impl FromStr for Model {
    type Err = UnknownModel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "legacy" => Ok(Model::Legacy),
            "mailbox" => Ok(Model::Mailbox),
            "bridge" => Ok(Model::Bridge),
            _ => Err(UnknownModel(s.to_string())),
        }
    }
}
