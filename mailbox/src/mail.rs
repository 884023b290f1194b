//! Mails and their priorities.
//!
//! A [`Mail`] is whatever the mailbox carries (`T`) plus a [`Priority`]. The priority does not
//! order mails: it hides them. A take at priority `p` sees only mails whose priority is `>= p`,
//! in FIFO order, and skips the others without moving them. So `take(Priority::MIN)` is plain
//! FIFO, and an operator at chain index `i` that yields at `Priority::operator(i)` sees its own
//! mails, those of the operators behind it, and `MAX` mails, but never a mail of an operator
//! upstream of it nor a task-level mail (a checkpoint trigger).
//!
//! | priority | who uses it |
//! |---|---|
//! | [`Priority::MIN`] (-1) | task-level mails: checkpoint triggers |
//! | [`Priority::operator`]`(i)` (0, 1, ...) | the timers and events of the operator at chain index `i` |
//! | [`Priority::MAX`] (`i32::MAX`) | control mails (poison, resume, failure report), checkpoint complete / abort notices |

use std::fmt;

/// How far down the chain a mail is visible: a take at priority `p` sees only mails whose
/// priority is `>= p`. See the [module docs](self).
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::Priority;
///
/// assert!(Priority::MIN < Priority::operator(0));
/// assert!(Priority::operator(0) < Priority::operator(1));
/// assert!(Priority::operator(1_000) < Priority::MAX);
/// assert_eq!(Priority::operator(3).get(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(i32);

impl Priority {
    /// Task-level mails, with no operator: visible only to the main loop and `MIN` takes.
    pub const MIN: Priority = Priority(-1);
    /// Visible to every take: control mails and checkpoint notices.
    pub const MAX: Priority = Priority(i32::MAX);

    /// The priority of the operator at chain index `index` (0 = head). Indices too large for an
    /// `i32` saturate just below [`MAX`](Self::MAX).
    #[inline]
    pub fn operator(index: usize) -> Priority {
        Priority(i32::try_from(index).unwrap_or(i32::MAX).min(i32::MAX - 1))
    }

    /// The raw value (`-1` for [`MIN`](Self::MIN)).
    #[inline]
    pub fn get(self) -> i32 {
        self.0
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
