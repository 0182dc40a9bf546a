//! Shutdown on SIGTERM or SIGINT, shared by every Bloodraven binary: one
//! [`Shutdown`] handle that listeners, controllers and long requests wait on.
//! Kubernetes sends SIGTERM and waits the Pod's termination grace period
//! (30 s by default) before SIGKILL, so everything that waits on this has
//! to finish well within that (listeners: [`crate::SHUTDOWN_GRACE`]).

use tokio::sync::watch;

/// A cloneable view of whether the process is stopping.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// Starts the process's shutdown by hand (tests, or a component that must
/// stop the process: a dead listener, a lost elector).
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Trigger {
    /// Every [`Shutdown`] of this pair resolves from now on.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// A shutdown that only its [`Trigger`] starts.
    pub fn manual() -> (Trigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (Trigger(tx), Shutdown { rx })
    }

    /// A shutdown started by the first SIGTERM or SIGINT (logged once).
    /// Spawns the signal listener: call it inside the tokio runtime.
    pub fn on_signals() -> Shutdown {
        let (trigger, shutdown) = Shutdown::manual();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown signal received");
            trigger.stop();
        });
        shutdown
    }

    /// Whether shutdown has started.
    pub fn is_stopping(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once shutdown has started (at once if it has).
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            // An error means every trigger is gone: nothing can start it any more.
            if rx.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "failed to install the SIGTERM handler");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn every_clone_sees_the_stop_and_late_waiters_resolve_at_once() {
        let (trigger, shutdown) = Shutdown::manual();
        let waiting = tokio::spawn(shutdown.clone().stopped());
        assert!(!shutdown.is_stopping());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "nothing stopped yet");
        trigger.stop();
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
        assert!(shutdown.is_stopping());
        tokio::time::timeout(Duration::from_secs(1), shutdown.stopped()).await.unwrap();
    }
}
