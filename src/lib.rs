//! unlag
