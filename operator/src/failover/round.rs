//! A group's decision record for one round of its reconcile: read once,
//! at the start of the round, and replaced by every write the round makes,
//! so the engines that follow act on what the round knows without reading
//! it again, and every record write goes through one place ([`RoundRecord::write`]).
//!
//! The read at the start of the round may come from the watch cache (the
//! quiet case, see `record::Records::settled`: a cached copy that agrees
//! with status and has nothing in flight). An engine that is about to act on
//! the record (take up a request, admit it, decide) asks for it with
//! [`RoundRecord::fresh`]: a cached copy is then read once from the API
//! server, and what the round writes is fresh by construction. An action
//! that changes the decision or a site on the strength of the record (a
//! decision, finishing a pending promotion) reads it once more right before
//! ([`RoundRecord::reread`]): by then the copy may be seconds old. Every write
//! is a compare-and-swap on the copy the round holds, so a record changed
//! by anyone else since fails the write (409) instead of being overwritten;
//! the copy is then read again by the next action that needs it.

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};

use super::decision::operation_running;
use super::record::{Extra, Record};
use crate::controller::{Context, Error};

/// Whether the round's copy is confirmed against the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Not confirmed against the API server: the watch cache's copy (quiet:
    /// agrees with status, nothing in flight), or the copy a failed write
    /// left (the record may have changed since). Read before acting on it.
    Unconfirmed,
    /// The API server, or this round's own write.
    Fresh,
}

/// The decision record of one group for one round.
#[derive(Debug)]
pub(crate) struct RoundRecord {
    api: Api<ConfigMap>,
    group: String,
    uid: String,
    record: Option<Record>,
    source: Source,
}

impl RoundRecord {
    /// Reads the record of `group` for a round: from the watch cache when
    /// it is settled against the group's status, else from the API server.
    ///
    /// # Errors
    /// The API read failed.
    pub(crate) async fn read(ctx: &Context, group: &MysqlFailoverGroup) -> Result<RoundRecord, Error> {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let name = group.name_any();
        let uid = group.metadata.uid.clone().unwrap_or_default();
        let status = group.status.clone().unwrap_or_default();
        let decided = (status.active_site.as_deref(), status.topology_generation);
        let cached = ctx.groups.records.settled(&name, &uid, decided, operation_running(group));
        let (record, source) = match cached {
            Some(r) => (Some(r), Source::Unconfirmed),
            None => (ctx.groups.records.read(&api, &name).await?, Source::Fresh),
        };
        Ok(RoundRecord { api, group: name, uid, record, source })
    }

    /// The record as the round knows it (`None`: there is none).
    pub(crate) fn get(&self) -> Option<&Record> {
        self.record.as_ref()
    }

    /// The record, if it belongs to this group (its UID) and verifies.
    pub(crate) fn trusted(&self) -> Option<&Record> {
        self.record.as_ref().filter(|r| r.group_uid == self.uid && r.tampered.is_none())
    }

    /// The record for an action: a copy from the watch cache is read once
    /// from the API server first.
    ///
    /// # Errors
    /// The API read failed.
    pub(crate) async fn fresh(&mut self, ctx: &Context) -> Result<Option<&Record>, Error> {
        if self.source == Source::Unconfirmed {
            self.record = ctx.groups.records.read(&self.api, &self.group).await?;
            self.source = Source::Fresh;
        }
        Ok(self.record.as_ref())
    }

    /// The record read from the API server now, for an action that changes
    /// the decision or a site on the strength of it (a decision, finishing
    /// a pending promotion): the round's copy may be seconds old by then
    /// (probes, a fence, a catch-up), and a record edited meanwhile must
    /// stop the action, not fail its write after the site was changed.
    ///
    /// # Errors
    /// The API read failed.
    pub(crate) async fn reread(&mut self, ctx: &Context) -> Result<Option<&Record>, Error> {
        self.source = Source::Unconfirmed;
        self.fresh(ctx).await
    }

    /// Writes `site` at `generation` with `extra`, compare-and-swap on the
    /// round's copy (created when there is none; a record of an older
    /// group of the same name is overwritten), and keeps what was written.
    /// Leader only.
    ///
    /// # Errors
    /// `NotLeader`; the write failed (409 when anyone wrote since the
    /// copy was read: the copy is then read again before the next action).
    pub(crate) async fn write(
        &mut self,
        ctx: &Context,
        site: &str,
        generation: i64,
        extra: &Extra,
    ) -> Result<&Record, Error> {
        if !ctx.leadership.is_leader() {
            return Err(Error::NotLeader);
        }
        let previous = self.record.as_ref();
        match ctx.groups.records.write(&self.api, &self.group, &self.uid, site, generation, extra, previous).await {
            Ok(written) => {
                self.source = Source::Fresh;
                Ok(self.record.insert(written))
            }
            Err(e) => {
                // What the record is now is not known: the next action reads it.
                self.source = Source::Unconfirmed;
                Err(e)
            }
        }
    }
}
