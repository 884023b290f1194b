//! Key-ordered mode's lanes: at most one call in flight per key; the key's later records wait
//! in input order until the call before them is final.
//!
//! | lane state | meaning | moves to |
//! |---|---|---|
//! | free (absent) | no call of the key is in flight | busy (a record of the key is admitted: its call starts) |
//! | busy | one call of the key is in flight; the key's later records wait behind it | busy (the call is final and a record waited: its call starts), free (the call is final and none waited) |

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a lane as it is: a lane is already a hash of its key (two MurmurHash3 halves,
/// [`KeyPlace::lane`](streamtask_core::async_io::KeyPlace::lane)), so hashing it again (SipHash,
/// the map's default) would only add cost to every record. Lanes chosen by an attacker are not
/// a concern: they come from the job's own keys through a hash.
#[derive(Default)]
struct LaneHasher(u64);

impl Hasher for LaneHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` lanes are hashed (`write_u64`); any other input still hashes consistently.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, lane: u64) {
        self.0 = lane;
    }
}

/// A record admitted to the queue whose call waits for its key's lane.
pub(super) struct Waiting<I> {
    /// Its entry in the queue.
    pub(super) entry: u64,
    pub(super) input: I,
    pub(super) timestamp: Option<i64>,
}

pub(super) struct KeyLanes<I> {
    /// A lane is present while its key has a call in flight; the deque holds the key's records
    /// admitted since, oldest first.
    busy: HashMap<u64, VecDeque<Waiting<I>>, BuildHasherDefault<LaneHasher>>,
    /// Deques of lanes that became free, reused for the next busy lanes (no allocation per
    /// record once as many lanes as the capacity exist).
    spare: Vec<VecDeque<Waiting<I>>>,
    waiting: usize,
}

impl<I> KeyLanes<I> {
    pub(super) fn new() -> Self {
        KeyLanes {
            busy: HashMap::default(),
            spare: Vec::new(),
            waiting: 0,
        }
    }

    /// `record` of `lane` was admitted: hands it back if its call may start now (the lane was
    /// free and is busy from here on), or keeps it behind the lane's call in flight.
    #[inline]
    pub(super) fn enter(&mut self, lane: u64, record: Waiting<I>) -> Option<Waiting<I>> {
        match self.busy.entry(lane) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push_back(record);
                self.waiting += 1;
                None
            }
            Entry::Vacant(free) => {
                free.insert(self.spare.pop().unwrap_or_default());
                Some(record)
            }
        }
    }

    /// The call in flight of `lane` became final: the record whose call starts next (the lane
    /// stays busy), or `None` (the lane is free).
    #[inline]
    pub(super) fn leave(&mut self, lane: u64) -> Option<Waiting<I>> {
        let Entry::Occupied(mut queue) = self.busy.entry(lane) else {
            return None;
        };
        if let Some(next) = queue.get_mut().pop_front() {
            self.waiting -= 1;
            return Some(next);
        }
        self.spare.push(queue.remove());
        None
    }

    /// Records waiting for their key's call.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(entry: u64) -> Waiting<u32> {
        Waiting {
            entry,
            input: entry as u32,
            timestamp: None,
        }
    }

    #[test]
    fn one_call_per_lane_and_the_rest_wait_in_order() {
        let mut lanes = KeyLanes::new();
        assert_eq!(lanes.enter(7, w(0)).map(|r| r.entry), Some(0));
        assert!(lanes.enter(7, w(1)).is_none());
        assert_eq!(
            lanes.enter(8, w(2)).map(|r| r.entry),
            Some(2),
            "another key runs"
        );
        assert!(lanes.enter(7, w(3)).is_none());
        assert_eq!(lanes.waiting(), 2);
        assert_eq!(lanes.leave(7).map(|r| r.entry), Some(1));
        assert_eq!(lanes.leave(7).map(|r| r.entry), Some(3));
        assert!(lanes.leave(7).is_none(), "free again");
        assert_eq!(lanes.enter(7, w(4)).map(|r| r.entry), Some(4));
        assert!(lanes.leave(8).is_none());
        assert_eq!(lanes.waiting(), 0);
    }
}
