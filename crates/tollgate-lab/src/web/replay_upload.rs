//! `POST /api/replays`: a CSV of timestamps kept under an id, for `traffic=replay&replay=ID`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;

use super::lab::Lab;
use super::params::{MAX_REPLAYS, ParamError};
use super::reply::{bad_request, json_response};
use crate::Replay;

/// What an upload answers: the trace's id for `replay=`, its size and span.
#[derive(Serialize)]
struct Uploaded {
    id: u64,
    len: usize,
    span_ns: u64,
}

pub(super) async fn upload_replay(State(lab): State<Lab>, body: Bytes) -> Response {
    let Ok(text) = std::str::from_utf8(&body) else {
        return bad_request(&ParamError {
            field: "replay".to_owned(),
            error: "replay: the upload is not UTF-8 text; send a CSV of timestamps in seconds"
                .to_owned(),
        });
    };
    let replay = match Replay::from_csv(text) {
        Ok(replay) => replay,
        Err(error) => {
            return bad_request(&ParamError {
                field: "replay".to_owned(),
                error: error.to_string(),
            });
        }
    };
    let answer = Uploaded {
        id: 0,
        len: replay.len(),
        span_ns: u64::try_from(replay.span().as_nanos()).unwrap_or(u64::MAX),
    };
    let id = {
        let mut replays = lab.replays.lock();
        let id = replays.next_id;
        replays.next_id += 1;
        if replays.traces.len() == MAX_REPLAYS {
            replays.traces.pop_front();
        }
        replays.traces.push_back((id, replay));
        id
    };
    json_response(StatusCode::OK, &Uploaded { id, ..answer })
}
