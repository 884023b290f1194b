//! A legacy source for job tests: counts to a limit, slowly enough that checkpoints fall
//! inside the run.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use streamtask_core::OperatorError;

/// Counts to `limit`, pausing a millisecond every 5 records (outside the lock) so checkpoints
/// fall inside the run.
pub struct SlowCount {
    /// The count to reach (exclusive).
    pub limit: u64,
}

impl streamtask_legacy::SourceFunction for SlowCount {
    type Out = u64;
    type State = u64;
    fn run(
        &mut self,
        ctx: &mut streamtask_legacy::SourceContext<'_, u64, u64>,
    ) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let n = {
                let mut locked = ctx.lock();
                let n = *locked.state();
                if n == self.limit {
                    return Ok(());
                }
                locked.collect(n)?;
                *locked.state_mut() = n + 1;
                n
            };
            if n % 5 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }
}
