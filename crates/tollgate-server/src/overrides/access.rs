//! Who may use the overrides API on a listener: bearer tokens from a file, the listener's mutual TLS, loopback, or nobody.
//!
//! Anyone who can change an override can lift a limit, so the API answers
//! only a caller it can name: one with a token of `--overrides-token-file`
//! (each line `ID:TOKEN`, or a bare token named by its line), or one whose
//! client certificate the listener's mutual TLS verified (against its CA
//! and SAN allow-list). Both configured, both are required. With neither,
//! it answers only on a loopback listener; beyond loopback it is disabled,
//! every request refused with 403 and the reason.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::Path;

use subtle::ConstantTimeEq;

/// One accepted token and the name it is logged under.
#[derive(Clone)]
struct Token {
    id: String,
    secret: Vec<u8>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The tokens of a token file.
#[derive(Clone, Debug)]
pub struct Tokens {
    tokens: Vec<Token>,
}

/// The shortest token accepted, so a guessable one is refused at start.
pub const MIN_TOKEN_BYTES: usize = 16;

impl Tokens {
    /// Reads `path`: one token a line, `ID:TOKEN` or a bare token (named
    /// `line-N`); blank lines and lines starting with `#` are skipped.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error: io::Error| format!("cannot read {}: {error}", path.display()))?;
        Self::parse(&text).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// The tokens of a token file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (id, secret) = match line.split_once(':') {
                Some((id, secret)) => (id.trim().to_owned(), secret.trim()),
                None => (format!("line-{}", index + 1), line),
            };
            if secret.len() < MIN_TOKEN_BYTES {
                return Err(format!(
                    "line {}: the token of `{id}` is {} bytes, shorter than {MIN_TOKEN_BYTES}",
                    index + 1,
                    secret.len()
                ));
            }
            tokens.push(Token {
                id,
                secret: secret.as_bytes().to_vec(),
            });
        }
        if tokens.is_empty() {
            return Err("holds no token".to_owned());
        }
        Ok(Tokens { tokens })
    }

    /// The id of the token `presented`, compared in constant time with each.
    fn find(&self, presented: &[u8]) -> Option<&str> {
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.secret.as_slice().ct_eq(presented)) && found.is_none() {
                found = Some(token.id.as_str());
            }
        }
        found
    }
}

/// How a listener lets callers in.
#[derive(Clone, Debug)]
pub enum Access {
    /// Every caller may, named by its peer address (a loopback listener without credentials).
    Loopback,
    /// A caller must show what `requires` asks for.
    Authenticated {
        /// A bearer token, when a token file is set.
        tokens: Option<Tokens>,
        /// Whether the listener verified a client certificate on every connection.
        mutual_tls: bool,
    },
    /// Nobody may: the reason, answered with 403.
    Disabled(String),
}

impl Access {
    /// The access of a listener bound to `bound`, with `tokens` (from
    /// `--overrides-token-file`) and whether it requires client certificates.
    pub fn decide(bound: SocketAddr, tokens: Option<Tokens>, mutual_tls: bool) -> Self {
        if tokens.is_some() || mutual_tls {
            return Access::Authenticated { tokens, mutual_tls };
        }
        if bound.ip().is_loopback() {
            return Access::Loopback;
        }
        Access::Disabled(format!(
            "the overrides API is disabled on this listener ({bound}): it is beyond loopback and has no credentials to ask for; \
             set --overrides-token-file, or require client certificates (--http-tls with --tls-client-ca), and restart"
        ))
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        match self {
            Access::Loopback => {
                "open to every caller of the loopback listener (no --overrides-token-file, no mutual TLS)".to_owned()
            }
            Access::Authenticated { tokens, mutual_tls } => match (tokens, mutual_tls) {
                (Some(_), true) => "a bearer token and a verified client certificate required".to_owned(),
                (Some(_), false) => "a bearer token required".to_owned(),
                _ => "a verified client certificate required (mutual TLS)".to_owned(),
            },
            Access::Disabled(reason) => reason.clone(),
        }
    }

    /// Who the caller is (for the change log), or why it is refused: 401 or 403 and a message.
    ///
    /// `client_names` are the DNS names of the client certificate the
    /// listener verified (with mutual TLS), logged as `client-certificate:NAMES`.
    pub fn admit(
        &self,
        authorization: Option<&[u8]>,
        peer: Option<SocketAddr>,
        client_names: &[String],
    ) -> Result<String, (u16, String)> {
        let peer = peer.map_or_else(|| "unknown peer".to_owned(), |p| p.to_string());
        match self {
            Access::Loopback => Ok(format!("anonymous@{peer}")),
            Access::Disabled(reason) => Err((403, reason.clone())),
            Access::Authenticated { tokens, mutual_tls } => {
                let mut who = Vec::new();
                if let Some(tokens) = tokens {
                    let presented = authorization
                        .and_then(|value| value.strip_prefix(b"Bearer "))
                        .map(<[u8]>::trim_ascii);
                    let Some(presented) = presented else {
                        return Err((
                            401,
                            "the overrides API needs `Authorization: Bearer TOKEN` (a token of --overrides-token-file)".to_owned(),
                        ));
                    };
                    let Some(id) = tokens.find(presented) else {
                        return Err((
                            403,
                            "the bearer token is not one of --overrides-token-file".to_owned(),
                        ));
                    };
                    who.push(format!("token:{id}"));
                }
                if *mutual_tls {
                    who.push(format!("client-certificate:{}", client_names.join(",")));
                }
                Ok(format!("{}@{peer}", who.join("+")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# operators\nops:0123456789abcdef0123\n\nfedcba9876543210fedc\n";

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn a_token_file_names_each_token_and_refuses_short_ones() {
        let tokens = Tokens::parse(FILE).expect("reads");
        assert_eq!(tokens.find(b"0123456789abcdef0123"), Some("ops"));
        assert_eq!(tokens.find(b"fedcba9876543210fedc"), Some("line-4"));
        assert_eq!(tokens.find(b"0123456789abcdef012"), None);
        let short = Tokens::parse("ops:short\n").expect_err("short");
        assert!(short.contains("shorter than 16"), "{short}");
        assert!(
            Tokens::parse("# none\n")
                .expect_err("empty")
                .contains("no token")
        );
    }

    #[test]
    fn beyond_loopback_without_credentials_the_api_is_disabled() {
        let peer = Some(addr("10.0.0.9:5000"));
        let open = Access::decide(addr("0.0.0.0:8080"), None, false);
        let (status, message) = open.admit(None, peer, &[]).expect_err("disabled");
        assert_eq!(status, 403);
        assert!(message.contains("--overrides-token-file"), "{message}");
        let loopback = Access::decide(addr("127.0.0.1:8080"), None, false);
        assert_eq!(
            loopback.admit(None, peer, &[]).expect("open"),
            "anonymous@10.0.0.9:5000"
        );
        let mtls = Access::decide(addr("0.0.0.0:8080"), None, true);
        let names = ["ops.example".to_owned()];
        assert_eq!(
            mtls.admit(None, peer, &names).expect("verified"),
            "client-certificate:ops.example@10.0.0.9:5000"
        );
    }

    #[test]
    fn a_token_is_required_once_a_token_file_is_set() {
        let tokens = Tokens::parse(FILE).expect("reads");
        let access = Access::decide(addr("127.0.0.1:8080"), Some(tokens), false);
        let peer = Some(addr("127.0.0.1:5000"));
        assert_eq!(access.admit(None, peer, &[]).expect_err("none").0, 401);
        assert_eq!(
            access
                .admit(Some(b"Basic abc"), peer, &[])
                .expect_err("basic")
                .0,
            401
        );
        assert_eq!(
            access
                .admit(Some(b"Bearer wrong-token-of-twenty"), peer, &[])
                .expect_err("wrong")
                .0,
            403
        );
        assert_eq!(
            access
                .admit(Some(b"Bearer 0123456789abcdef0123"), peer, &[])
                .expect("known"),
            "token:ops@127.0.0.1:5000"
        );
    }
}
