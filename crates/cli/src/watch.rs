//! `penguin watch`: follow a served session.

use std::process::ExitCode;

use penguin::omni_protocol::Frame;

use crate::console::stdout_is_terminal;
use crate::render::Renderer;
use crate::untrusted::{errln, Untrusted};

pub(crate) async fn watch(
    session_id: String,
    url: String,
    token: Option<String>,
    follow: bool,
) -> Result<ExitCode, String> {
    let token = match token.or_else(|| {
        std::env::var("PENGUIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    }) {
        Some(t) => t,
        None => {
            let path = penguin::trace_store::data_root().join(penguin::server::TOKEN_FILE);
            std::fs::read_to_string(&path)
                .map(|t| t.trim().to_owned())
                .map_err(|e| format!("no token: pass --token, set PENGUIN_TOKEN, or run the server here ({}: {e})", path.display()))?
        }
    };
    let session_id = penguin::watch::resolve_session_id(&url, &token, &session_id)
        .await
        .map_err(|e| e.to_string())?;
    let target = penguin::watch::Target {
        base: url,
        token,
        session_id,
    };
    let mut renderer = Renderer::new(
        std::io::stdout(),
        crate::render::color_for(stdout_is_terminal()),
    );
    let mut failed = None;
    let state = penguin::watch::watch(&target, follow, |m| {
        if let Err(e) = renderer.frame(&Frame::new(m.clone())) {
            failed.get_or_insert(e);
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    if let Some(e) = failed {
        return Err(format!("stdout: {e}"));
    }
    if let Some(title) = state.title {
        errln!("title: {}", Untrusted(&title));
    }
    if let Some(warning) = state.trace_warning {
        errln!("penguin: {}", Untrusted(&warning.to_string()));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
