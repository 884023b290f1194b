//! streamtask-mailbox: under construction.
