//! `flipside serve`

use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::Args;

use super::llm::LlmArgs;
use crate::home::Home;
use crate::llm::server::router;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (0 as the port picks a free one)
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub llm: LlmArgs,
}

/// Serves the embedded model's OpenAI-compatible API until interrupted.
pub fn run(home: &Home, args: ServeArgs) -> Result<()> {
    anyhow::ensure!(
        !args.llm.remote(),
        "serve runs the embedded model: drop --api-base"
    );
    let engine = args.llm.local(home)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener.local_addr()?;
        // One line on stdout, so scripts and tests can find the port.
        println!("listening on http://{address}/v1");
        tracing::info!(
            "serving {} (POST /v1/chat/completions, /v1/completions; GET /v1/models)",
            crate::llm::Editor::model(&engine)
        );
        axum::serve(listener, router(std::sync::Arc::new(engine)))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the server failed")
    })
}
