//! streamtask-legacy: under construction.
