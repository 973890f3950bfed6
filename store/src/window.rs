//! The recent changes a watch can resume from: the last 1,024 events and the revision before
//! the oldest of them.

use std::collections::VecDeque;

use super::{Event, StoreError};

/// Events kept for watches that resume from a revision.
const WINDOW: usize = 1024;

/// Recent events, oldest first.
pub struct Window {
    recent: VecDeque<Event>,
    /// A watch may start at this revision or later.
    floor: u64,
}

impl Window {
    /// An empty window: watches may start at `floor` or later.
    pub fn new(floor: u64) -> Window {
        Window {
            recent: VecDeque::new(),
            floor,
        }
    }

    /// Remembers an event, forgetting the oldest past the window's size.
    pub fn push(&mut self, event: Event) {
        if self.recent.len() == WINDOW {
            if let Some(old) = self.recent.pop_front() {
                self.floor = old.revision;
            }
        }
        self.recent.push_back(event);
    }

    /// The events after `from`; `Gone` when `from` is older than the window.
    pub fn since(&self, from: u64) -> Result<Vec<Event>, StoreError> {
        if from < self.floor {
            return Err(StoreError::Gone {
                asked: from,
                oldest: self.floor,
            });
        }
        Ok(self
            .recent
            .iter()
            .filter(|e| e.revision > from)
            .cloned()
            .collect())
    }
}
