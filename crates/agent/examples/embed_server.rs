//! `penguin-server` embedded in a program of one's own: its own `SessionFactory` decides what a
//! session is (here: this crate's `Session`s over the offline demo model and the built-in tools
//! in one fixed workspace, sandboxed), the server does ids, SSE streams, approvals, steering and
//! history. It binds a port the OS chooses, says which, and stops on Ctrl-C through a shutdown
//! future of its own.
//!
//! ```sh
//! cargo run --example embed_server -- /path/to/workspace
//! ```
//! then open the printed link in a browser, or drive the API with the token:
//!
//! ```sh
//! curl -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
//!      -d '{"input": [{"type": "text", "text": "What is here?"}]}' \
//!      http://127.0.0.1:PORT/api/sessions/ID/tasks
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use penguin_agent::models::ModelSpec;
use penguin_agent::session::{Session, SessionError, SessionSpec};
use penguin_engine::EngineConfig;
use penguin_server::{
    CreateSession, FactoryError, HostedSession, LoadSession, ServeOptions, Server, SessionFactory,
};
use penguin_tools::{BuiltinTools, Sandbox, SandboxRequest, ToolsConfig};

/// Every session: the demo model, the built-in tools, one workspace.
struct DemoSessions {
    workspace: PathBuf,
    sandbox: Sandbox,
}

impl DemoSessions {
    fn tools(&self) -> Result<Arc<BuiltinTools>, FactoryError> {
        let config = ToolsConfig {
            sandbox: self.sandbox.clone(),
            ..ToolsConfig::default()
        };
        BuiltinTools::new(&self.workspace, config)
            .map(Arc::new)
            .map_err(FactoryError::internal)
    }
}

impl SessionFactory for DemoSessions {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        if req.workspace.is_some() {
            return Err(FactoryError::invalid_request(
                "workspace",
                "this server has one workspace",
            ));
        }
        let spec = SessionSpec::new(req.location.clone(), self.workspace.clone())
            .with_system_prompt("You are a demo agent.")
            .with_durability(req.durability);
        let session = Session::create_for_model(spec, &ModelSpec::demo(), self.tools()?)
            .map_err(FactoryError::internal)?;
        Ok(Box::new(session))
    }

    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let (resumed, writer) = Session::load(&req.location, &req.session_id, req.durability)
            .map_err(|e| match e {
                SessionError::WorkspaceMissing(w) => FactoryError::WorkspaceMissing(w),
                other => FactoryError::unrecoverable(other),
            })?;
        let engine = EngineConfig::default();
        let session =
            Session::resume_for_model(resumed, writer, engine, &ModelSpec::demo(), self.tools()?)
                .map_err(FactoryError::unrecoverable)?;
        Ok(Box::new(session))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or(std::env::current_dir()?);
    // The server keeps its token and the traces under the data root: no command may see it.
    let data_root = penguin_trace_store::data_root();
    let sandbox = Sandbox::resolve(&SandboxRequest {
        protected: vec![data_root.clone()],
        ..SandboxRequest::default()
    })?;
    let factory = DemoSessions {
        workspace: workspace.canonicalize()?,
        sandbox,
    };
    let mut options = ServeOptions::new(Arc::new(factory));
    options.data_root = data_root;
    // Its own sessions, not the ones `penguin run` keeps under the agent `penguin`.
    options.agent = "embed-server".into();
    options.port = 0; // any free port: the server says which
    let server = Server::bind(options).await?;
    println!("listening on {}", server.url());
    println!("open the web app: {}", server.sign_in_url());
    println!("access token: {}", server.token_source());
    // Any future stops it: here Ctrl-C, in a service its own shutdown signal.
    server
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
            println!("stopping");
        })
        .await?;
    Ok(())
}
