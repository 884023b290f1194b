//! checkpoint (under construction).
