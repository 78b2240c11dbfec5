//! Downloads one registry file: streamed to `<file>.part` next to its final
//! place, resumed with HTTP Range after a cut, retried with exponential
//! backoff, every wait bounded by a timeout, sha256-checked, then renamed.

use super::DatasetError;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::StatusCode;
use reqwest::blocking::Client;
use reqwest::header::{CONTENT_RANGE, RANGE};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for response headers or for the next chunk of the body.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait a server's `Retry-After` may ask for; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// What to fetch and how.
#[derive(Debug, Clone)]
pub struct FetchSpec<'a> {
    /// Mirrors, tried in order.
    pub urls: &'a [String],
    pub sha256: Option<&'a str>,
    pub size: Option<u64>,
    /// Extra rounds over the mirrors after the first fails (with backoff).
    pub retries: u32,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Do not trust an already downloaded file whose checksum is unknown.
    pub force: bool,
}

/// Fetches into `dir`; returns the file and the URL it came from. Warnings
/// (unknown checksum, discarded stale files) are appended to `notes`.
pub fn fetch(dir: &Path, spec: &FetchSpec<'_>, notes: &mut Vec<String>) -> Result<(PathBuf, String), DatasetError> {
    let first = spec.urls.first().ok_or_else(|| DatasetError::input("no URL to download from"))?;
    let file_name = url_file_name(first)?;
    fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
    let done = dir.join(&file_name);
    let part = dir.join(format!("{file_name}.part"));

    if done.is_file() {
        match spec.sha256 {
            Some(want) if sha256_file(&done)?.eq_ignore_ascii_case(want) => return Ok((done, shown_url(first))),
            None if !spec.force => return Ok((done, shown_url(first))),
            _ => {
                notes.push(format!("{}: discarded (checksum unknown or wrong), downloading again", done.display()));
                fs::remove_file(&done).map_err(|e| DatasetError::io(&done, e))?;
            }
        }
    }

    let client = Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(READ_TIMEOUT)
        .redirect(redirect_policy())
        .build()
        .map_err(|e| DatasetError::Download { url: shown_url(first), msg: format!("cannot set up HTTP: {e}") })?;
    let mut last = None;
    let mut url_used = None;
    // The longest wait a server asked for (`Retry-After`) in the last round.
    let mut asked = Duration::ZERO;
    'rounds: for round in 0..=spec.retries {
        if round > 0 {
            std::thread::sleep(backoff(round).max(asked));
        }
        asked = Duration::ZERO;
        let mut all_unresolved = true;
        for url in spec.urls {
            match attempt(&client, url, &part, spec.size, spec.progress) {
                Ok(()) => {
                    url_used = Some(shown_url(url));
                    break 'rounds;
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Unresolved(e)) => last = Some(e),
                Err(Failure::Retry(e, wait)) => {
                    all_unresolved = false;
                    asked = asked.max(wait.unwrap_or_default());
                    if round < spec.retries {
                        tracing::warn!("{e}; retrying in {} s", backoff(round + 1).max(asked).as_secs());
                    }
                    last = Some(e);
                }
            }
        }
        // No mirror's host resolves (offline, or a typo): waiting will not fix it.
        if all_unresolved && let Some(e) = last {
            return Err(e);
        }
    }
    let Some(url) = url_used else {
        let e = last.expect("at least one attempt was made");
        return Err(match e {
            DatasetError::Download { url, msg } => DatasetError::Download {
                url,
                msg: format!("{msg} (gave up after {} attempts; rerun to resume)", spec.retries + 1),
            },
            e => e,
        });
    };

    let len = fs::metadata(&part).map_err(|e| DatasetError::io(&part, e))?.len();
    let actual = sha256_file(&part)?;
    if let Some(want) = spec.sha256
        && !actual.eq_ignore_ascii_case(want)
    {
        let _ = fs::remove_file(&part);
        return Err(DatasetError::Checksum { file: part, expected: want.to_owned(), actual });
    }
    if let Some(size) = spec.size
        && size != len
    {
        let _ = fs::remove_file(&part);
        return Err(DatasetError::Download {
            url,
            msg: format!(
                "got {len} bytes, the registry says {size}; the partial file was deleted, rerun to download again"
            ),
        });
    }
    if spec.sha256.is_none() {
        notes.push(format!(
            "{file_name}: no sha256 in the registry to check against; downloaded file has sha256 {actual}"
        ));
    }
    fs::rename(&part, &done).map_err(|e| DatasetError::io(&done, e))?;
    Ok((done, url))
}

/// After a failed fetch: removes empty `.part` files, then `dir` and `parent`
/// if that leaves them empty (a partial download is kept for the rerun to resume).
pub fn remove_if_empty(dir: &Path, parent: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    // remove_dir refuses a directory that is not empty: exactly what is wanted.
    let _ = fs::remove_dir(dir);
    let _ = fs::remove_dir(parent);
}

enum Failure {
    /// The network or server failed: try again (the `.part` is kept for resume),
    /// not before the wait the server asked for (`Retry-After`), if any.
    Retry(DatasetError, Option<Duration>),
    /// Retrying cannot help (HTTP 404, a local write error).
    Fatal(DatasetError),
    /// The host name does not resolve: another mirror may, a retry will not.
    Unresolved(DatasetError),
}

/// A DNS failure, as reqwest's error chain words it (hyper's connector).
fn is_unresolved(chain: &str) -> bool {
    chain.contains("dns error") || chain.contains("failed to lookup address")
}

/// Redirects as reqwest's default policy follows them (loops and chains over
/// 10 are errors), except from https to plain http: the file would arrive
/// unauthenticated, and an entry without a sha256 has nothing else to check it.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if downgrades(attempt.previous(), attempt.url()) {
            let msg = format!(
                "redirected from https to plain http ({}): refused, the file would arrive unauthenticated; \
                 give the registry entry an https mirror",
                shown_url(attempt.url().as_str())
            );
            attempt.error(msg)
        } else {
            reqwest::redirect::Policy::default().redirect(attempt)
        }
    })
}

/// Whether following a redirect to `next` leaves https for an unencrypted scheme.
fn downgrades(previous: &[reqwest::Url], next: &reqwest::Url) -> bool {
    previous.iter().any(|u| u.scheme() == "https") && next.scheme() != "https"
}

/// A 429's or 503's `Retry-After`, capped at `MAX_RETRY_AFTER`.
fn retry_after(resp: &reqwest::blocking::Response) -> Option<Duration> {
    let v = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(v, SystemTime::now())
}

/// `Retry-After` in either form RFC 9110 allows: delay-seconds, or an
/// HTTP-date (`Wed, 21 Oct 2026 07:28:00 GMT`), read as the wait from `now`
/// until then (none when it has passed). `None` when it is neither: the
/// backoff alone applies.
fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    let wait = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(v).ok()?.duration_since(now).unwrap_or_default(),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// One request: resumes from the `.part` length when there is one. A body
/// longer than the registry's `size` is refused as it arrives, so that a
/// wrong mirror cannot fill the disk before the size is checked.
fn attempt(client: &Client, url: &str, part: &Path, size: Option<u64>, progress: bool) -> Result<(), Failure> {
    let net = |msg: String| DatasetError::Download { url: shown_url(url), msg };
    let have = fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    let mut req = client.get(url);
    if have > 0 {
        req = req.header(RANGE, format!("bytes={have}-"));
    }
    let mut resp = req.send().map_err(|e| {
        let redirect = e.is_redirect();
        let chain = error_chain(&e.without_url());
        if redirect {
            // A redirect loop, or one past the limit: the same request will loop again.
            Failure::Fatal(net(format!("{chain}; not retried: check the URL in the registry")))
        } else if is_unresolved(&chain) {
            Failure::Unresolved(net(format!(
                "cannot resolve the host ({chain}); not retried: check the network and the URL"
            )))
        } else {
            Failure::Retry(net(format!("request failed: {chain}")), None)
        }
    })?;
    let status = resp.status();
    let content_range = resp.headers().get(CONTENT_RANGE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (start, total) = match status {
        StatusCode::PARTIAL_CONTENT => {
            let (s, t) = parse_content_range(content_range.as_deref())
                .ok_or_else(|| Failure::Retry(net(format!("bad Content-Range {content_range:?}")), None))?;
            if s != have {
                let _ = fs::remove_file(part);
                return Err(Failure::Retry(net(format!("server resumed at byte {s}, not {have}; restarting")), None));
            }
            (have, t.or(resp.content_length().map(|l| have + l)))
        }
        StatusCode::OK => (0, resp.content_length()),
        StatusCode::RANGE_NOT_SATISFIABLE => {
            let total = content_range.as_deref().and_then(|c| c.strip_prefix("bytes */")?.parse::<u64>().ok());
            if total == Some(have) {
                return Ok(()); // the .part is already complete
            }
            let _ = fs::remove_file(part);
            return Err(Failure::Retry(net("server refused to resume; restarting".into()), None));
        }
        s if s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS => {
            return Err(Failure::Retry(net(format!("HTTP {s}")), retry_after(&resp)));
        }
        s => return Err(Failure::Fatal(net(format!("HTTP {s}; check the URL in the registry")))),
    };

    let too_long = |got: String| {
        let _ = fs::remove_file(part);
        let size = size.unwrap_or_default();
        Failure::Fatal(net(format!(
            "{got}, the registry says the file has {size}: refused and deleted before the disk fills; \
             check the entry's size and URL in the registry"
        )))
    };
    if let (Some(size), Some(t)) = (size, total)
        && t > size
    {
        return Err(too_long(format!("the server announces {t} bytes")));
    }
    let fatal_io = |e: std::io::Error| Failure::Fatal(DatasetError::io(part, e));
    let mut file = if start == 0 {
        File::create(part).map_err(fatal_io)?
    } else {
        OpenOptions::new().append(true).open(part).map_err(fatal_io)?
    };
    let bar = progress.then(|| progress_bar(total, start, url));
    let mut pos = start;
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match resp.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = file.flush();
                return Err(Failure::Retry(net(format!("connection lost after {pos} bytes: {e}")), None));
            }
        };
        if size.is_some_and(|size| pos + n as u64 > size) {
            drop(file);
            return Err(too_long(format!("the server sent more than {} bytes", size.unwrap_or_default())));
        }
        file.write_all(&buf[..n]).map_err(fatal_io)?;
        pos += n as u64;
        if let Some(b) = &bar {
            b.set_position(pos);
        }
    }
    file.sync_all().map_err(fatal_io)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match total {
        Some(t) if pos != t => Err(Failure::Retry(net(format!("connection closed after {pos} of {t} bytes")), None)),
        _ => Ok(()),
    }
}

fn progress_bar(total: Option<u64>, start: u64, url: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(total, indicatif::ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(url_file_name(url).unwrap_or_default());
    bar.set_position(start);
    bar
}

/// `bytes START-END/TOTAL` -> (START, TOTAL if known).
fn parse_content_range(v: Option<&str>) -> Option<(u64, Option<u64>)> {
    let rest = v?.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let start = range.split_once('-')?.0.trim().parse().ok()?;
    Some((start, total.trim().parse().ok()))
}

fn backoff(round: u32) -> Duration {
    let secs = 1u64 << (round - 1).min(5);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

/// The last path segment of a URL, checked to be a plain file name.
pub fn url_file_name(url: &str) -> Result<String, DatasetError> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let name = path.rsplit('/').next().unwrap_or_default();
    if name.is_empty() || name.starts_with('.') || name.contains('\\') {
        return Err(DatasetError::input(format!("{}: the URL does not end in a file name", shown_url(url))));
    }
    Ok(name.to_owned())
}

/// `url` as it may be shown and stored: a user name and password
/// (`https://user:TOKEN@host/...`) and the values of query parameters
/// (`?token=...`, signed URLs) are secrets, replaced by `***`.
pub fn shown_url(url: &str) -> String {
    let Ok(mut u) = reqwest::Url::parse(url) else {
        // Not a URL: keep what precedes any `@` or `?` out of sight all the same.
        let tail = url.rsplit('@').next().unwrap_or(url);
        return match tail.split_once('?') {
            Some((head, _)) => format!("{head}?***"),
            None => tail.to_owned(),
        };
    };
    if !u.username().is_empty() || u.password().is_some() {
        let _ = u.set_password(None);
        let _ = u.set_username("***");
    }
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u.query_pairs().map(|(k, _)| (k.into_owned(), "***".to_owned())).collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, DatasetError> {
    File::open(path).and_then(crate::format::sha256_read).map_err(|e| DatasetError::io(path, e))
}

/// reqwest hides the useful part (connection refused, timed out) in its sources.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_and_file_names_parse() {
        assert_eq!(parse_content_range(Some("bytes 100-199/200")), Some((100, Some(200))));
        assert_eq!(parse_content_range(Some("bytes 5-9/*")), Some((5, None)));
        assert_eq!(parse_content_range(Some("items 1-2/3")), None);
        assert_eq!(url_file_name("http://h/a/arxiv.zip?x=1").unwrap(), "arxiv.zip");
        assert!(url_file_name("http://h/a/").is_err());
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(10), MAX_BACKOFF);
    }

    #[test]
    fn only_a_redirect_leaving_https_is_a_downgrade() {
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        assert!(downgrades(&[u("https://a.org/x.zip")], &u("http://a.org/x.zip")));
        assert!(downgrades(&[u("https://a.org/x"), u("https://b.org/y")], &u("http://c.org/x.zip")));
        assert!(!downgrades(&[u("https://a.org/x.zip")], &u("https://b.org/x.zip")));
        assert!(!downgrades(&[u("http://a.org/x.zip")], &u("http://b.org/x.zip")));
        assert!(!downgrades(&[u("http://a.org/x.zip")], &u("https://b.org/x.zip")));
    }

    #[test]
    fn shown_urls_hide_credentials_and_query_values() {
        assert_eq!(
            shown_url("https://bob:hunter2@h.org/d/a.zip?token=SECRET&dl=1"),
            "https://***@h.org/d/a.zip?token=***&dl=***"
        );
        assert_eq!(shown_url("https://TOKEN@h.org/a.zip"), "https://***@h.org/a.zip");
        assert_eq!(shown_url("http://h.org/a.zip"), "http://h.org/a.zip");
        assert_eq!(shown_url("not a url?key=SECRET"), "not a url?***");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_both_capped() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2026 07:28:00 GMT").unwrap();
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(parse_retry_after(" 7 ", now), secs(7));
        assert_eq!(parse_retry_after("100000", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2026 07:28:09 GMT", now), secs(9));
        // RFC 850 and asctime, the obsolete forms a recipient must still read.
        assert_eq!(parse_retry_after("Wednesday, 21-Oct-26 07:28:30 GMT", now), secs(30));
        assert_eq!(parse_retry_after("Wed Oct 21 07:29:00 2026", now), secs(60));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2026 08:28:00 GMT", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2026 07:27:00 GMT", now), secs(0), "a date gone by");
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }
}
