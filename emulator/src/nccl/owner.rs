//! How a clique's net part reaches its clique: `net::Owner` for `comm::Clique`, which hands
//! the other processes' messages to `remote` and `split` and settles the initialization. It
//! sits above them all, so the net part needs no path to the modules that use it.

use super::comm::{Clique, settle};
use super::net::{Net, Owner};
use super::types::{Failure, Init, Meta, SlotKey};
use super::{remote, split};
use std::ffi::c_int;
use std::sync::Arc;

impl Owner for Clique {
    fn nranks(&self) -> usize {
        self.nranks
    }

    fn attach(&self, net: Arc<Net>) -> bool {
        self.net.set(net).is_ok()
    }

    fn init_state(&self) -> Init {
        Clique::init_state(self)
    }

    fn is_forming(&self) -> bool {
        Clique::is_forming(self)
    }

    fn init_failed(&self) -> bool {
        Clique::init_failed(self)
    }

    fn label(&self) -> String {
        Clique::label(self)
    }

    fn settle(&self, r: Result<(), Failure>) {
        settle(self, r);
    }

    fn on_data(
        self: Arc<Self>,
        net: &Arc<Net>,
        from: u32,
        key: SlotKey,
        place: usize,
        meta: Meta,
        input: Result<Option<Vec<u8>>, String>,
    ) -> Result<(), String> {
        remote::on_data(&self, net, from, key, place, meta, input)
    }

    fn on_done(
        self: Arc<Self>,
        net: &Arc<Net>,
        from: u32,
        key: SlotKey,
        result: Result<(), (i32, String)>,
    ) -> Result<(), String> {
        remote::on_done(&self, net, from, key, result)
    }

    fn on_split(
        self: Arc<Self>,
        net: &Net,
        from: u32,
        round: u64,
        rank: usize,
        color: c_int,
        key: c_int,
    ) -> Result<(), String> {
        split::on_remote(&self, net, from, round, rank, color, key)
    }

    fn set_remote_error(&self, msg: String) {
        *self.remote_error.lock() = Some(msg);
    }

    fn peer_lost(&self, net: &Net) {
        remote::fail_needing(self, net);
        split::wake(self);
    }
}
