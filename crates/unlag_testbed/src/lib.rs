//! unlag_testbed
