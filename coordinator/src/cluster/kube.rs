//! The real API-server backend (in progress).
