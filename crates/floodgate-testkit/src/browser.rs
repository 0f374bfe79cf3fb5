//! A real headless Chromium (Debian's `chromium`), driven over the
//! DevTools protocol, for tests of pages: what the page's console and
//! scripts reported, and values read from the page with JavaScript.
//!
//! Started with a fresh profile and nothing that reaches the network on
//! its own (no sync, no component updates, no background networking).
//! Fails when Chromium is missing (scripts/test.sh installs it).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::{Browser as Chrome, LaunchOptions, Tab};

/// The Chromium binary: `$CHROMIUM`, else `/usr/bin/chromium`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    let debian = PathBuf::from("/usr/bin/chromium");
    if !debian.exists() {
        crate::require("chromium");
    }
    debian
}

/// A running headless Chromium; closed when dropped.
pub struct Browser {
    chrome: Chrome,
    _profile: tempfile::TempDir,
}

/// An open page, and what its console reported.
pub struct Page {
    tab: Arc<Tab>,
    problems: Arc<Mutex<Vec<String>>>,
}

impl Browser {
    /// Starts Chromium.
    pub fn start() -> Browser {
        let profile = tempfile::tempdir().expect("a profile directory");
        let args: Vec<&OsStr> = [
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ]
        .iter()
        .map(OsStr::new)
        .collect();
        let options = LaunchOptions::default_builder()
            .path(Some(chromium()))
            .headless(true)
            .sandbox(false)
            .user_data_dir(Some(profile.path().to_path_buf()))
            .args(args)
            .idle_browser_timeout(Duration::from_secs(120))
            .build()
            .expect("launch options");
        let chrome = Chrome::new(options).expect("start chromium");
        Browser {
            chrome,
            _profile: profile,
        }
    }

    /// Opens `url` and waits for it to load; console errors, uncaught
    /// exceptions and failed loads are collected from before the
    /// navigation.
    pub fn open(&self, url: &str) -> Page {
        let tab = self.chrome.new_tab().expect("a tab");
        tab.set_default_timeout(Duration::from_secs(30));
        let problems = Arc::new(Mutex::new(Vec::new()));
        let seen = problems.clone();
        tab.enable_runtime().expect("Runtime.enable");
        tab.enable_log().expect("Log.enable");
        tab.add_event_listener(Arc::new(move |event: &Event| {
            let problem = match event {
                Event::RuntimeExceptionThrown(e) => Some(format!(
                    "exception: {} {}",
                    e.params.exception_details.text,
                    e.params
                        .exception_details
                        .exception
                        .as_ref()
                        .and_then(|x| x.description.clone())
                        .unwrap_or_default()
                )),
                Event::RuntimeConsoleAPICalled(e) => {
                    let kind = format!("{:?}", e.params.Type);
                    (kind == "Error" || kind == "Assert" || kind == "Warning").then(|| {
                        let args: Vec<String> = e
                            .params
                            .args
                            .iter()
                            .map(|a| {
                                a.value
                                    .as_ref()
                                    .map(std::string::ToString::to_string)
                                    .or_else(|| a.description.clone())
                                    .unwrap_or_default()
                            })
                            .collect();
                        format!("console.{kind}: {}", args.join(" "))
                    })
                }
                Event::LogEntryAdded(e) => {
                    let level = format!("{:?}", e.params.entry.level);
                    (level == "Error" || level == "Warning").then(|| {
                        format!(
                            "log {level}: {} {}",
                            e.params.entry.text,
                            e.params.entry.url.as_deref().unwrap_or("")
                        )
                    })
                }
                _ => None,
            };
            if let Some(p) = problem {
                seen.lock().unwrap().push(p);
            }
        }))
        .expect("a listener");
        tab.navigate_to(url).expect("navigate");
        tab.wait_until_navigated().expect("the page loads");
        Page { tab, problems }
    }
}

impl Page {
    /// Evaluates `expression` (awaiting a promise) and returns its value
    /// as JSON (`null` when it has none).
    pub fn eval(&self, expression: &str) -> serde_json::Value {
        let result = self
            .tab
            .evaluate(expression, true)
            .unwrap_or_else(|e| panic!("{expression}: {e}"));
        result.value.unwrap_or(serde_json::Value::Null)
    }

    /// Console errors and warnings, uncaught exceptions and failed loads
    /// so far.
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }

    /// A PNG screenshot of the page.
    pub fn screenshot(&self) -> Vec<u8> {
        use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
        self.tab
            .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
            .expect("a screenshot")
    }
}
