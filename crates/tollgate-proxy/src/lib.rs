//! `tollgate proxy`: the HTTP sidecar and edge proxy that applies local and global limits (not built yet).
//!
//! It will sit on `tollgate-core` for local limits and ask a global rate
//! limit service over RLS; it knows nothing of Redis.
