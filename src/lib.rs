//! streamtask: under construction.
