//! unlag_net
