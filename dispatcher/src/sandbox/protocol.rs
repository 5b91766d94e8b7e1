//! The runner protocol: one [`RunRequest`] and one [`RunOutcome`] per Unix-socket
//! connection, each a frame of a 4-byte big-endian length and that many bytes of JSON.
//!
//! Frames are bounded on read ([`MAX_REQUEST_FRAME`], [`MAX_RESPONSE_FRAME`]): a length
//! past the bound is refused before anything is allocated. Byte strings (stdin, stdout,
//! stderr) travel as standard base64.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest request frame read: an event up to 8 MiB, in base64, plus the command.
pub const MAX_REQUEST_FRAME: usize = 12 * 1024 * 1024;
/// Largest response frame read: stdout and stderr at their 1 MiB caps, in base64.
pub const MAX_RESPONSE_FRAME: usize = 4 * 1024 * 1024;

/// One command hook run (CONTRACT §5 command): what the dispatcher asks the runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunRequest {
    /// Run as `sh -c <command>`.
    pub command: String,
    /// Variables passed through from the *runner's* environment (CONTRACT §5 command.2).
    #[serde(default)]
    pub allowed_env_vars: Vec<String>,
    /// Working directory, which must exist where the command runs; `None`: the run's
    /// private temporary directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The hook's timeout in milliseconds (the runner caps it at `MAX_TIMEOUT_MS`).
    pub timeout_ms: u64,
    /// The event JSON, given on stdin.
    #[serde(with = "b64")]
    pub stdin: Vec<u8>,
}

/// Which output stream passed its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// How a run ended, as the runner (or the local supervisor) saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum RunOutcome {
    /// `sh` exited (`exitCode`) or was killed (`signal`); outputs read to EOF, each at
    /// most 1 MiB.
    #[serde(rename_all = "camelCase")]
    Completed {
        exit_code: Option<i32>,
        signal: Option<i32>,
        #[serde(with = "b64")]
        stdout: Vec<u8>,
        #[serde(with = "b64")]
        stderr: Vec<u8>,
    },
    /// The timeout passed; the tree was killed.
    Timeout,
    /// A stream passed its cap; the tree was killed.
    OutputTooLarge { stream: Stream },
    /// `cwd` does not exist or is not a directory.
    CwdMissing { message: String },
    /// `sh` (or its supervisor, or the private directory) could not be set up.
    SpawnFailed { message: String },
    /// Output could not be collected.
    Failed { message: String },
    /// The runner could not be reached or refused the run (busy, bad frame).
    RunnerUnavailable { message: String },
}

/// Frame errors.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("runner frame of {len} bytes is over the {max}-byte cap")]
    TooLarge { len: usize, max: usize },
    #[error("runner frame: {0}")]
    Io(#[from] std::io::Error),
    #[error("runner frame is not valid JSON of the protocol: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes `value` as one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> Result<(), FrameError> {
    let body = serde_json::to_vec(value)?;
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge {
        len: body.len(),
        max: u32::MAX as usize,
    })?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&body).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame of at most `max` bytes and parses it.
pub async fn read_frame<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
    max: usize,
) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}

/// Bytes as a base64 string.
mod b64 {
    use super::STANDARD;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        STANDARD
            .decode(s.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// Base64 of `bytes` (for tests and logs).
pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_keep_bytes() {
        let req = RunRequest {
            command: "cat".into(),
            allowed_env_vars: vec!["LANG".into()],
            cwd: None,
            timeout_ms: 1500,
            stdin: vec![0, 255, b'{'],
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &req).await.unwrap();
        assert_eq!(&buf[..4], &((buf.len() - 4) as u32).to_be_bytes());
        let text = std::str::from_utf8(&buf[4..]).unwrap();
        assert!(text.contains(&format!("\"stdin\":\"{}\"", encode(&[0, 255, b'{']))));
        let back: RunRequest = read_frame(&mut buf.as_slice(), MAX_REQUEST_FRAME)
            .await
            .unwrap();
        assert_eq!(back, req);

        let out = RunOutcome::OutputTooLarge {
            stream: Stream::Stderr,
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &out).await.unwrap();
        assert_eq!(
            &buf[4..],
            br#"{"outcome":"outputTooLarge","stream":"stderr"}"#
        );
    }

    #[tokio::test]
    async fn oversized_frames_are_refused_before_reading() {
        let mut buf = (MAX_RESPONSE_FRAME as u32 + 1).to_be_bytes().to_vec();
        buf.extend_from_slice(b"{}");
        let err = read_frame::<_, RunOutcome>(&mut buf.as_slice(), MAX_RESPONSE_FRAME)
            .await
            .unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { len, max } if len == MAX_RESPONSE_FRAME + 1 && max == MAX_RESPONSE_FRAME),
            "{err}"
        );
    }

    #[tokio::test]
    async fn unknown_fields_and_bad_base64_are_refused() {
        for body in [
            br#"{"command":"x","timeoutMs":1,"stdin":"","user":"root"}"#.as_slice(),
            br#"{"command":"x","timeoutMs":1,"stdin":"***"}"#.as_slice(),
        ] {
            let mut buf = (body.len() as u32).to_be_bytes().to_vec();
            buf.extend_from_slice(body);
            let r = read_frame::<_, RunRequest>(&mut buf.as_slice(), MAX_REQUEST_FRAME).await;
            assert!(matches!(r, Err(FrameError::Json(_))), "{r:?}");
        }
    }
}
