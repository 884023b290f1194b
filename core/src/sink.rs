//! sink (under construction).
