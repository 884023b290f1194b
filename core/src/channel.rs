//! channel (under construction).
