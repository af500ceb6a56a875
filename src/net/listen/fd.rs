//! The soft open-file limit, raised to the hard limit at start-up: a default soft limit
//! of 1024 is a few hundred clients away from `EMFILE`.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the new soft limit, or
/// `None` where the platform has no such limit or the call failed (logged at WARN).
pub fn raise_nofile_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            tracing::debug!(nofile = limit, "open-file limit");
            Some(limit)
        }
        Err(error) => {
            tracing::warn!(%error, "could not raise the open-file limit");
            None
        }
    }
}

/// Warns when the listeners' connection limits together come within 256 descriptors of
/// the open-file limit: the limits would not protect the process then.
pub fn check_connection_budget(nofile: Option<u64>, total_connections: usize) {
    if let Some(nofile) = nofile {
        let needed = total_connections as u64 + 256;
        if needed > nofile {
            tracing::warn!(
                nofile,
                total_connections,
                "the listeners' max_connections add up to more than the open-file limit allows; lower them or raise the limit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn raises_soft_to_hard() {
        let raised = super::raise_nofile_limit();
        #[cfg(unix)]
        {
            let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap_or((0, 0));
            assert_eq!(raised, Some(soft));
            // Linux caps the raise at nr_open; either way soft never exceeds hard.
            assert!(soft <= hard && soft >= 1024, "soft {soft} hard {hard}");
        }
    }
}
