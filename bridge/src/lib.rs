//! streamtask-bridge: under construction.
