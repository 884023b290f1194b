//! Channel scripts for the gate and aligner properties: records numbered per channel,
//! barriers with increasing ids (some skipped, as when an upstream task aborted a checkpoint),
//! and maybe end of input.

use proptest::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    Record(u32),
    Barrier(u64),
    End,
}

/// One channel's script: records and barriers (ids grow by 1 or 2), maybe end of input.
pub(crate) fn script() -> impl Strategy<Value = Vec<Item>> {
    (
        prop::collection::vec(
            prop_oneof![3 => Just(None), 2 => (1u64..=2).prop_map(Some)],
            0..14,
        ),
        any::<bool>(),
    )
        .prop_map(|(ops, ends)| {
            let (mut id, mut seq) = (0, 0);
            let mut items: Vec<Item> = ops
                .into_iter()
                .map(|op| match op {
                    None => {
                        seq += 1;
                        Item::Record(seq - 1)
                    }
                    Some(step) => {
                        id += step;
                        Item::Barrier(id)
                    }
                })
                .collect();
            if ends {
                items.push(Item::End);
            }
            items
        })
}

/// The records of `script` before its barrier `id` (all of them if it has none).
pub(crate) fn records_before(script: &[Item], id: u64) -> Vec<u32> {
    script
        .iter()
        .take_while(|item| **item != Item::Barrier(id))
        .filter_map(|item| match item {
            Item::Record(r) => Some(*r),
            _ => None,
        })
        .collect()
}
