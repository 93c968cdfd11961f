//! sluice-dashboard (under construction).
