//! CORE (Dixit et al., 2022): retrieve label-flipped excerpts for the item's opinion-bearing
//! sentences, extract their keywords, and have an LLM make a minimal edit guided by them with
//! few-shot prompts (§3). Also its two ablations: LLM-only (the same prompt without keywords)
//! and retrieve-only (each query sentence replaced by its best helper).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};
use flipside_shared::records::{CoreProvenance, PromptRef, Provenance};

use super::{EditSettings, Method, MethodCard, Models, Stages};
use crate::editing::keywords::{Lexicons, keywords};
use crate::editing::prompts::{PromptTemplate, Slots, Task};
use crate::editing::reply::{copied_demonstration, parse_edit};
use crate::editing::retrieve::Retrieve;
use crate::llm::{FinishReason, LlmClient, Rejected, Request, Sampling};
use crate::pipeline::{
    Attempt, Candidate, Context, ContextStage, Editor, Item, Judge, NoEdit, WrittenText,
};
use flipside_shared::records::Retrieval;

/// Retrieve, extract keywords, edit with the LLM.
pub struct Core;

/// The LLM alone: CORE's prompt without keywords (its GPT-3 ablation).
pub struct LlmOnly;

/// The query sentences replaced by their best retrieved helpers (its CF-DPR ablation).
pub struct RetrieveOnly;

impl Method for Core {
    fn card(&self) -> &'static MethodCard {
        &MethodCard {
            id: "core",
            label: "CORE (retrieve + LLM)",
            description: "Retrieve label-flipped helpers, extract their keywords, edit with the LLM guided by them",
            retrieves: true,
            uses_llm: true,
            uses_keywords: true,
            infills: false,
            reproduces: false,
            always_verifies: false,
            candidates: 1,
        }
    }
    fn check(&self, settings: &EditSettings) -> Result<()> {
        prompt_template(settings, "core", true).map(drop)
    }
    fn stages(&self, models: &Models, settings: &EditSettings) -> Result<Stages> {
        let editor = PromptEditor::new(models, settings, "core", true)?;
        Ok(Stages {
            context: Some(Arc::new(RetrievalContext::new(models, settings))),
            editor: Arc::new(editor),
        })
    }
}

impl Method for LlmOnly {
    fn card(&self) -> &'static MethodCard {
        &MethodCard {
            id: "llm-only",
            label: "LLM only",
            description: "Edit with the LLM alone: CORE's prompt without retrieval or keywords",
            retrieves: false,
            uses_llm: true,
            uses_keywords: false,
            infills: false,
            reproduces: false,
            always_verifies: false,
            candidates: 1,
        }
    }
    fn check(&self, settings: &EditSettings) -> Result<()> {
        prompt_template(settings, "llm-only", false).map(drop)
    }
    fn stages(&self, models: &Models, settings: &EditSettings) -> Result<Stages> {
        Ok(Stages {
            context: None,
            editor: Arc::new(PromptEditor::new(models, settings, "llm-only", false)?),
        })
    }
}

impl Method for RetrieveOnly {
    fn card(&self) -> &'static MethodCard {
        &MethodCard {
            id: "retrieve-only",
            label: "Retrieve only",
            description: "Replace the opinion-bearing sentences by their top retrieved helpers (no LLM)",
            retrieves: true,
            uses_llm: false,
            uses_keywords: false,
            infills: false,
            reproduces: false,
            always_verifies: false,
            candidates: 1,
        }
    }
    fn stages(&self, models: &Models, settings: &EditSettings) -> Result<Stages> {
        Ok(Stages {
            context: Some(Arc::new(RetrievalContext::new(models, settings))),
            editor: Arc::new(Substitution),
        })
    }
}

/// CORE's context: helpers retrieved for the item's query sentences, and their keywords.
pub struct RetrievalContext {
    retriever: Arc<dyn Retrieve>,
    lexicons: Arc<Lexicons>,
    task: Task,
    max_keywords: usize,
}

impl RetrievalContext {
    /// Over `models`' retriever, which [`super::pipeline`] has checked is there.
    pub fn new(models: &Models, settings: &EditSettings) -> Self {
        Self::over(
            models.retriever.clone().expect("checked by pipeline()"),
            models.lexicons.clone(),
            settings.task,
            settings.max_keywords,
        )
    }

    /// Over `retriever`, keeping at most `max_keywords` keywords.
    pub fn over(
        retriever: Arc<dyn Retrieve>,
        lexicons: Arc<Lexicons>,
        task: Task,
        max_keywords: usize,
    ) -> Self {
        Self {
            retriever,
            lexicons,
            task,
            max_keywords,
        }
    }

    /// Helpers for `item` (`per_query` per query sentence, or the retriever's default) and
    /// their keywords: the context stage's work, also what `POST /api/retrieve` shows.
    pub fn retrieve(&self, item: &Item, per_query: Option<usize>) -> Result<Context> {
        let started = Instant::now();
        let mut retrieval = self.retriever.retrieve(item, per_query)?;
        let excerpts: Vec<&str> = retrieval.excerpts.iter().map(|e| e.text.as_str()).collect();
        retrieval.keywords = keywords(&excerpts, &self.lexicons, self.task, self.max_keywords);
        Ok(Context {
            retrieval: Some(retrieval),
            millis: started.elapsed().as_secs_f64() * 1e3,
            ..Context::default()
        })
    }
}

impl ContextStage for RetrievalContext {
    fn context(&self, item: &Item) -> Result<Context> {
        self.retrieve(item, None)
    }
}

/// An LLM prompted with a template (CORE's, with keywords; LLM-only's, without).
struct PromptEditor {
    llm: Arc<dyn LlmClient>,
    template: PromptTemplate,
    sampling: Sampling,
    /// Whether the prompt gets the context's keywords.
    with_keywords: bool,
}

impl PromptEditor {
    fn new(
        models: &Models,
        settings: &EditSettings,
        kind: &str,
        with_keywords: bool,
    ) -> Result<Self> {
        Ok(Self {
            llm: models.llm.clone().expect("checked by pipeline()"),
            template: prompt_template(settings, kind, with_keywords)?,
            sampling: settings.sampling,
            with_keywords,
        })
    }
}

/// The template `settings.prompts` names for method `kind`, or the built-in `{kind}-{task}`
/// template, checked against the task and whether the editor gives it keywords.
fn prompt_template(
    settings: &EditSettings,
    kind: &str,
    with_keywords: bool,
) -> Result<PromptTemplate> {
    let task = settings.task;
    let id = settings.prompts.get(kind).cloned().unwrap_or_else(|| {
        let task = match task {
            Task::Sentiment => "sentiment",
            Task::Nli => "nli",
        };
        format!("{kind}-{task}")
    });
    let template = PromptTemplate::load(&id)?;
    if template.task != task {
        bail!(
            "template {} is for {:?} data, but the items are {task:?} data",
            template.id,
            template.task
        );
    }
    match (with_keywords, template.uses_keywords()) {
        (true, false) => bail!(
            "template {} has no {{keywords}}: the {kind} method needs them",
            template.id
        ),
        (false, true) => bail!(
            "template {} asks for {{keywords}}, which the {kind} method does not give",
            template.id
        ),
        _ => {}
    }
    Ok(template)
}

impl Editor for PromptEditor {
    fn model(&self) -> Option<&str> {
        Some(self.llm.model())
    }

    fn prompt(&self) -> Option<PromptRef> {
        Some(PromptRef {
            id: self.template.id.clone(),
            hash: self.template.hash.clone(),
        })
    }

    fn propose(
        &self,
        item: &Item,
        context: &Context,
        attempt: Attempt,
        _judge: &dyn Judge,
    ) -> Result<std::result::Result<Candidate, NoEdit>> {
        let seed = attempt.seed;
        let retrieval = context.retrieval.clone().unwrap_or_default();
        let keywords = self.with_keywords.then_some(retrieval.keywords.as_slice());
        if keywords.is_some_and(<[String]>::is_empty) {
            return Ok(Err(NoEdit::new("retrieval found no keywords", None)));
        }
        let sampling = Sampling {
            seed,
            max_tokens: self.sampling.max_tokens.min(reply_tokens(&item.text)),
            ..self.sampling
        };
        let slots = Slots {
            text: &item.text,
            premise: item.premise.as_deref().unwrap_or_default(),
            label: &item.label,
            target: &item.target,
            keywords,
        };
        let request = Request {
            prompt: self.template.chat(&slots),
            sampling,
            stop: self.template.stop.clone(),
            cancel: context.cancel.clone(),
        };
        // A rejected request is this item's failure; anything else stops the run (it resumes).
        let completion = match &context.written {
            Some(WrittenText(written)) => self
                .llm
                .complete_streaming(&request, &mut |piece| written(attempt.number, piece)),
            None => self.llm.complete(&request),
        };
        let completion = match completion {
            Ok(completion) => completion,
            Err(error) => match error.downcast_ref::<Rejected>() {
                Some(rejected) => return Ok(Err(NoEdit::new(rejected.to_string(), None))),
                None => return Err(error.context(format!("editing {}", item.key()))),
            },
        };
        let reply = completion.text;
        let unusable = |reason: String| {
            let no_edit = NoEdit::new(reason, Some(reply.clone()));
            Ok(Err(no_edit.spent(
                completion.prompt_tokens,
                completion.completion_tokens,
            )))
        };
        let text = match parse_edit(&reply, &self.template.answer_prefix, &item.text) {
            Ok(text) => text,
            Err(reason) => return unusable(reason),
        };
        if completion.finish_reason == FinishReason::Length && !reply.contains('\n') {
            return unusable(format!("cut off at max_tokens {}", sampling.max_tokens));
        }
        if copied_demonstration(&text, &self.template.demonstration_answers()).is_some() {
            return unusable("copied a demonstration's answer".into());
        }
        let Retrieval {
            queries,
            excerpts,
            keywords,
        } = retrieval;
        Ok(Ok(Candidate {
            text,
            provenance: Provenance::Core(CoreProvenance {
                queries,
                retrieved: excerpts,
                keywords: if self.with_keywords {
                    keywords
                } else {
                    Vec::new()
                },
                prompt: self.prompt(),
                sampling: Some(sampling),
                reply: Some(reply),
            }),
            prompt_tokens: completion.prompt_tokens,
            completion_tokens: completion.completion_tokens,
            verdict: None,
        }))
    }
}

/// The most tokens a reply to `text` needs: a minimal edit is about as long as the original
/// (about 1.3 tokens a word), with room for a line of chatter. Small models sometimes ramble
/// on to any limit; such replies are failed attempts however long they get.
fn reply_tokens(text: &str) -> usize {
    2 * text.split_whitespace().count() + 48
}

/// Retrieve-only: each query sentence replaced by its best retrieved helper.
struct Substitution;

impl Editor for Substitution {
    fn model(&self) -> Option<&str> {
        None
    }

    fn propose(
        &self,
        item: &Item,
        context: &Context,
        _attempt: Attempt,
        _judge: &dyn Judge,
    ) -> Result<std::result::Result<Candidate, NoEdit>> {
        let retrieval = context.retrieval.clone().unwrap_or_default();
        Ok(match substitute(item, &retrieval) {
            Some(text) => Ok(Candidate {
                text,
                provenance: Provenance::Core(CoreProvenance {
                    queries: retrieval.queries,
                    retrieved: retrieval.excerpts,
                    keywords: retrieval.keywords,
                    ..CoreProvenance::default()
                }),
                prompt_tokens: 0,
                completion_tokens: 0,
                verdict: None,
            }),
            None => Err(NoEdit::new("nothing was retrieved", None)),
        })
    }
}

/// `item`'s text with each query sentence replaced by its best helper; `None` when nothing
/// was retrieved.
fn substitute(item: &Item, retrieval: &Retrieval) -> Option<String> {
    let mut text = item.text.clone();
    let mut replaced = false;
    for (q, query) in retrieval.queries.iter().enumerate() {
        if let Some(best) = retrieval.excerpts.iter().find(|e| e.query == q) {
            if item.premise.is_some() || retrieval.queries.len() == 1 && text.trim() == query {
                text = best.text.clone();
            } else {
                text = text.replacen(query.as_str(), &best.text, 1);
            }
            replaced = true;
        }
    }
    replaced.then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Abandoned;
    use crate::pipeline::RefusingJudge;
    use flipside_shared::records::Excerpt;

    #[test]
    fn retrieve_only_replaces_each_query_sentence() {
        let item = Item {
            id: "r1".into(),
            text: "I saw it Monday. The plot is dull. It ran long.".into(),
            premise: None,
            label: "negative".into(),
            target: "positive".into(),
        };
        let excerpt = |query, text: &str| Excerpt {
            query,
            id: 0,
            text: text.into(),
            score: 0.5,
            rerank_score: None,
            label: None,
        };
        let retrieval = Retrieval {
            queries: vec!["The plot is dull.".into(), "It ran long.".into()],
            excerpts: vec![
                excerpt(0, "The plot is gripping."),
                excerpt(0, "unused second helper"),
            ],
            keywords: Vec::new(),
        };
        assert_eq!(
            substitute(&item, &retrieval).unwrap(),
            "I saw it Monday. The plot is gripping. It ran long."
        );
        let nothing = Retrieval {
            queries: vec!["x".into()],
            ..Default::default()
        };
        assert_eq!(substitute(&item, &nothing), None);
    }

    /// Answers at once, unless its caller has given up (as the embedded engine then does).
    struct Echo;

    impl LlmClient for Echo {
        fn model(&self) -> &str {
            "echo"
        }

        fn complete(&self, request: &Request) -> Result<crate::llm::Completion> {
            anyhow::ensure!(!request.cancel.is_cancelled(), Abandoned);
            Ok(crate::llm::Completion {
                text: "A dull film.".into(),
                prompt_tokens: 1,
                completion_tokens: 1,
                finish_reason: FinishReason::Stop,
            })
        }
    }

    #[test]
    fn the_llm_stops_when_the_items_caller_gives_up() {
        let editor = PromptEditor {
            llm: Arc::new(Echo),
            template: PromptTemplate::load("llm-only-sentiment").unwrap(),
            sampling: Sampling::default(),
            with_keywords: false,
        };
        let item = Item {
            id: "c1".into(),
            text: "A wonderful film.".into(),
            premise: None,
            label: "positive".into(),
            target: "negative".into(),
        };
        let context = Context::default();
        let attempt = Attempt { number: 1, seed: 0 };
        let judge = RefusingJudge(&[]);
        assert!(editor.propose(&item, &context, attempt, &judge).is_ok());
        context.cancel.cancel();
        let error = editor
            .propose(&item, &context, attempt, &judge)
            .unwrap_err();
        assert!(error.root_cause().is::<Abandoned>(), "{error:#}");
    }
}
