//! Mails and their priorities.
//!
#![doc = include_str!("mail.md")]

use std::fmt;

/// How far down the chain a mail is visible: a take at priority `p` sees only mails whose
/// priority is `>= p`.
///
#[doc = include_str!("mail.md")]
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::Priority;
///
/// assert!(Priority::DEFERRABLE < Priority::MIN);
/// assert!(Priority::MIN < Priority::operator(0));
/// assert!(Priority::operator(0) < Priority::operator(1));
/// assert!(Priority::operator(1_000) < Priority::MAX);
/// assert!(Priority::MAX < Priority::URGENT);
/// assert_eq!(Priority::operator(3).get(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(i32);

impl Priority {
    /// Deferrable mails (Flink's `MailOptions.deferrable()`): below every other priority, seen
    /// by the loop's own takes (in their turn, as every mail) and by `drain`, never by a yield
    /// ([`MailboxExecutor::yield_now`](crate::MailboxExecutor::yield_now) and
    /// [`try_yield`](crate::MailboxExecutor::try_yield) look no lower than [`MIN`](Self::MIN),
    /// whatever their executor's priority). For work that re-enqueues itself until it is done,
    /// such as the rest of an interrupted firing of event-time timers: a caller that yields
    /// until no mail is left would otherwise never get out (FLINK-35528).
    pub const DEFERRABLE: Priority = Priority(-2);
    /// Task-level mails, with no operator: visible only to the main loop and `MIN` takes.
    pub const MIN: Priority = Priority(-1);
    /// Visible to every take but [`URGENT`](Self::URGENT)'s: control mails and checkpoint
    /// notices.
    pub const MAX: Priority = Priority(i32::MAX - 1);
    /// Urgent mails (Flink 2.1's urgent mails, FLINK-35051): visible to every take, and taken
    /// before the rest of the batch being run and before every other mail a take would find,
    /// within the fairness rule that keeps a stream of them from starving the other mails
    /// (FLINK-39898; see [`TaskMailbox`](crate::TaskMailbox), "Urgent mails"). For what must
    /// not wait behind a batch of mails already taken: a checkpoint trigger.
    pub const URGENT: Priority = Priority(i32::MAX);

    /// The priority of the operator at chain index `index` (0 = head). Indices too large for an
    /// `i32` saturate just below [`MAX`](Self::MAX).
    #[inline]
    pub fn operator(index: usize) -> Priority {
        Priority(i32::try_from(index).unwrap_or(i32::MAX).min(i32::MAX - 2))
    }

    /// Whether this is [`URGENT`](Self::URGENT).
    #[inline]
    pub fn is_urgent(self) -> bool {
        self == Priority::URGENT
    }

    /// Whether this is [`DEFERRABLE`](Self::DEFERRABLE).
    #[inline]
    pub fn is_deferrable(self) -> bool {
        self == Priority::DEFERRABLE
    }

    /// The raw value (`-1` for [`MIN`](Self::MIN), `-2` for [`DEFERRABLE`](Self::DEFERRABLE)).
    #[inline]
    pub fn get(self) -> i32 {
        self.0
    }

    /// The chain index [`operator`](Self::operator) made this priority of, where that is
    /// exact: `None` for [`MIN`](Self::MIN), [`MAX`](Self::MAX), [`URGENT`](Self::URGENT) and
    /// the largest operator value, which every index from `i32::MAX - 2` on is capped to.
    #[inline]
    pub(crate) fn operator_index(self) -> Option<usize> {
        if (0..i32::MAX - 2).contains(&self.0) {
            usize::try_from(self.0).ok()
        } else {
            None
        }
    }
}

/// One mail: what it carries and its [`Priority`].
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::{Mail, Priority};
///
/// let mail = Mail::new(Priority::operator(2), "flush");
/// assert_eq!(mail.priority(), Priority::operator(2));
/// assert_eq!(mail.into_body(), "flush");
/// ```
pub struct Mail<T> {
    priority: Priority,
    body: T,
}

impl<T> Mail<T> {
    /// A mail carrying `body` at `priority`.
    #[inline]
    pub fn new(priority: Priority, body: T) -> Self {
        Mail { priority, body }
    }

    /// The mail's priority.
    #[inline]
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// What the mail carries.
    #[inline]
    pub fn body(&self) -> &T {
        &self.body
    }

    /// Takes what the mail carries.
    #[inline]
    pub fn into_body(self) -> T {
        self.body
    }
}

impl<T> fmt::Debug for Mail<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mail")
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event letter names its operator by its mail's priority: exact, or not at all.
    #[test]
    fn an_operator_priority_names_its_index_where_it_is_exact() {
        for index in [0, 1, 7, 1 << 20] {
            assert_eq!(Priority::operator(index).operator_index(), Some(index));
        }
        assert_eq!(Priority::MIN.operator_index(), None);
        assert_eq!(Priority::DEFERRABLE.operator_index(), None);
        assert_eq!(Priority::MAX.operator_index(), None);
        assert_eq!(Priority::URGENT.operator_index(), None);
        let capped = usize::try_from(i32::MAX - 2).unwrap();
        assert_eq!(Priority::operator(capped).operator_index(), None);
        assert_eq!(Priority::operator(usize::MAX).operator_index(), None);
    }
}
