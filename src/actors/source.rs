//! The Source actor: the program side of an operation.
//!
//! Each [`Context`](super::Context) call becomes a [`SourceEvent`] sent to
//! the Source actor, which forwards it to the step generator unless it is
//! fenced (paused by a migration), in which case it queues it, losing
//! nothing. Destroy uses no program (the null source).

use std::collections::VecDeque;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::protocol::{GenMsg, SourceEvent, SourceMsg};

/// The Source actor.
#[derive(Debug, Default)]
pub(crate) struct SourceActor;

/// The Source actor's state.
#[derive(Debug)]
pub(crate) struct SourceState {
    generator: ActorRef<GenMsg>,
    fenced: bool,
    queue: VecDeque<SourceEvent>,
}

fn forward(generator: &ActorRef<GenMsg>, e: SourceEvent) {
    let msg = match e {
        SourceEvent::Register(g, r) => GenMsg::Register(g, r),
        SourceEvent::Read(g, r) => GenMsg::Read(g, r),
        SourceEvent::Outputs(u, o, r) => GenMsg::Outputs(u, o, r),
        SourceEvent::Invoke(t, a, r) => GenMsg::Invoke(t, a, r),
        SourceEvent::Provider(q, r) => GenMsg::Provider(q, r),
        SourceEvent::Done(err) => GenMsg::ProgramDone(err),
    };
    // A stopped generator drops the reply ports: the program sees an error.
    let _ = generator.cast(msg);
}

impl Actor for SourceActor {
    type Msg = SourceMsg;
    type State = SourceState;
    type Arguments = ActorRef<GenMsg>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        generator: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SourceState {
            generator,
            fenced: false,
            queue: VecDeque::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SourceMsg::Event(e) if state.fenced => state.queue.push_back(e),
            SourceMsg::Event(e) => forward(&state.generator, e),
            SourceMsg::Fence(reply) => {
                state.fenced = true;
                let _ = reply.send(());
            }
            SourceMsg::Unfence => {
                state.fenced = false;
                while let Some(e) = state.queue.pop_front() {
                    forward(&state.generator, e);
                }
            }
        }
        Ok(())
    }
}
