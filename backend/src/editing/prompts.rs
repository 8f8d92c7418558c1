//! Prompt templates: TOML files a user can copy and edit (`flipside prompts export`). The
//! built-in ones are CORE's (Tables 10–11), its LLM-only ablation and LASS's (App. D).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::llm::{Message, Prompt};

/// The built-in templates: (file name, contents).
pub const BUILTIN_TEMPLATES: [(&str, &str); 5] = [
    (
        "core-sentiment.toml",
        include_str!("../../prompts/core-sentiment.toml"),
    ),
    (
        "llm-only-sentiment.toml",
        include_str!("../../prompts/llm-only-sentiment.toml"),
    ),
    ("core-nli.toml", include_str!("../../prompts/core-nli.toml")),
    (
        "llm-only-nli.toml",
        include_str!("../../prompts/llm-only-nli.toml"),
    ),
    (
        "lass-sentiment.toml",
        include_str!("../../prompts/lass-sentiment.toml"),
    ),
];

/// The placeholders a template may use.
const PLACEHOLDERS: [&str; 6] = [
    "text",
    "label",
    "target",
    "keywords",
    "premise",
    "hypothesis",
];

/// What a template is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// One text and its label.
    Sentiment,
    /// A premise–hypothesis pair; the hypothesis is edited.
    Nli,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TemplateFile {
    id: String,
    description: String,
    task: Task,
    system: String,
    answer_prefix: String,
    #[serde(default)]
    stop: Vec<String>,
    #[serde(default, skip_serializing_if = "DemonstrationLayout::is_inline")]
    demonstrations: DemonstrationLayout,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    template: TemplateBody,
}

/// Where a template's demonstrations go in the chat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DemonstrationLayout {
    /// In the one user message, before the instance (the papers' prompts).
    #[default]
    Inline,
    /// As earlier turns: each demonstration's question as a user message and its answer as the
    /// model's, then the instance (the instruction goes with the first question).
    Turns,
}

impl DemonstrationLayout {
    fn is_inline(&self) -> bool {
        *self == DemonstrationLayout::Inline
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TemplateBody {
    text: String,
}

/// A loaded prompt template.
#[derive(Debug, Clone)]
pub struct PromptTemplate {
    pub id: String,
    pub description: String,
    pub task: Task,
    /// The chat system message.
    pub system: String,
    /// The words that introduce the answer (the template's last line); removed from replies
    /// that repeat them.
    pub answer_prefix: String,
    pub stop: Vec<String>,
    /// Dataset label names → the words the prompt uses for them.
    pub labels: BTreeMap<String, String>,
    pub text: String,
    /// Where the demonstrations go in the chat.
    pub demonstrations: DemonstrationLayout,
    /// The first 16 hex digits of the file's sha256.
    pub hash: String,
}

/// The values filled into a template.
#[derive(Debug, Clone, Default)]
pub struct Slots<'a> {
    pub text: &'a str,
    pub premise: &'a str,
    pub label: &'a str,
    pub target: &'a str,
    pub keywords: Option<&'a [String]>,
}

impl PromptTemplate {
    /// Parses a template file's contents.
    pub fn parse(source: &str) -> Result<Self> {
        let file: TemplateFile = toml::from_str(source)?;
        let text = file.template.text.trim().to_string();
        check_placeholders(&text)?;
        let needed: &[&str] = match file.task {
            Task::Sentiment => &["{text}"],
            Task::Nli => &["{premise}", "{hypothesis}"],
        };
        for placeholder in needed {
            ensure!(
                text.contains(placeholder),
                "a {:?} template must contain {placeholder}",
                file.task
            );
        }
        let template = PromptTemplate {
            id: file.id,
            description: file.description,
            task: file.task,
            system: file.system,
            answer_prefix: file.answer_prefix,
            stop: file.stop,
            labels: file.labels,
            text,
            demonstrations: file.demonstrations,
            hash: hex::encode(&Sha256::digest(source.as_bytes())[..8]),
        };
        if template.demonstrations == DemonstrationLayout::Turns {
            let cut = Demonstrations::of(&template)
                .context("demonstrations = \"turns\" needs a sentiment template's layout")?;
            ensure!(
                !cut.blocks.is_empty(),
                "demonstrations = \"turns\": no demonstration starts as the {{text}} paragraph does"
            );
            ensure!(
                cut.blocks
                    .iter()
                    .all(|block| block.contains(&template.answer_prefix)),
                "demonstrations = \"turns\": each demonstration needs the answer prefix {:?}",
                template.answer_prefix
            );
        }
        Ok(template)
    }

    /// A built-in template by id, or a template file.
    pub fn load(spec: &str) -> Result<Self> {
        if let Some((_, source)) = BUILTIN_TEMPLATES
            .iter()
            .find(|(name, _)| name.strip_suffix(".toml") == Some(spec))
        {
            return Self::parse(source);
        }
        let path = Path::new(spec);
        if !path.is_file() {
            let ids: Vec<_> = BUILTIN_TEMPLATES
                .iter()
                .map(|(name, _)| name.trim_end_matches(".toml"))
                .collect();
            bail!(
                "{spec:?} is neither a template file nor a built-in template ({})",
                ids.join(", ")
            );
        }
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&source).with_context(|| format!("invalid template {}", path.display()))
    }

    /// A template file's contents: this template's settings with another id, description and
    /// text.
    pub fn with_text(&self, id: &str, description: &str, text: &str) -> Result<String> {
        let file = TemplateFile {
            id: id.to_string(),
            description: description.to_string(),
            task: self.task,
            system: self.system.clone(),
            answer_prefix: self.answer_prefix.clone(),
            stop: self.stop.clone(),
            labels: self.labels.clone(),
            template: TemplateBody {
                text: text.to_string(),
            },
            demonstrations: self.demonstrations,
        };
        Ok(toml::to_string_pretty(&file)?)
    }

    /// The answers of the template's demonstrations: the text after each answer prefix but the
    /// last (the instance's).
    pub fn demonstration_answers(&self) -> Vec<&str> {
        let mut answers: Vec<&str> = self
            .text
            .match_indices(self.answer_prefix.as_str())
            .map(|(at, _)| {
                let rest = &self.text[at + self.answer_prefix.len()..];
                rest.split("\n\n").next().unwrap_or_default().trim()
            })
            .collect();
        answers.pop();
        answers
    }

    /// Whether the template asks for keywords.
    pub fn uses_keywords(&self) -> bool {
        self.text.contains("{keywords}")
    }

    /// The prompt's word for a dataset label (the label itself when unmapped).
    pub fn label_word<'a>(&'a self, label: &'a str) -> &'a str {
        self.labels.get(label).map_or(label, String::as_str)
    }

    /// The filled-in template text.
    pub fn render(&self, slots: &Slots<'_>) -> String {
        self.fill(&self.text, slots)
    }

    /// `text` with the slots' values in its placeholders.
    fn fill(&self, text: &str, slots: &Slots<'_>) -> String {
        let keywords = slots.keywords.map(python_list).unwrap_or_default();
        // One pass, so that a value containing "{target}" is not filled in again.
        let mut out = String::with_capacity(text.len() + 256);
        let mut rest = text;
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let value = PLACEHOLDERS.iter().find_map(|&name| {
                let tail = after.strip_prefix(name)?.strip_prefix('}')?;
                let value = match name {
                    "text" | "hypothesis" => slots.text,
                    "premise" => slots.premise,
                    "label" => self.label_word(slots.label),
                    "target" => self.label_word(slots.target),
                    _ => keywords.as_str(),
                };
                Some((value, tail))
            });
            match value {
                Some((value, tail)) => {
                    out.push_str(value);
                    rest = tail;
                }
                None => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// The chat prompt: the system message, then the filled-in template as the user's message
    /// or, with [`DemonstrationLayout::Turns`], as turns.
    pub fn chat(&self, slots: &Slots<'_>) -> Prompt {
        let mut messages = vec![Message::new("system", self.system.clone())];
        match self.demonstrations {
            DemonstrationLayout::Turns if let Some(turns) = self.turns(slots) => {
                messages.extend(turns)
            }
            _ => messages.push(Message::new("user", self.render(slots))),
        }
        Prompt::Chat(messages)
    }

    /// The filled-in template as turns: each demonstration's question (the first after the
    /// instruction) as the user's and its answer as the model's, then the instance; `None` when
    /// the demonstrations cannot be told apart (checked when a template file is parsed).
    fn turns(&self, slots: &Slots<'_>) -> Option<Vec<Message>> {
        let layout = Demonstrations::of(self).ok()?;
        let mut user = layout.head.clone();
        let mut messages = Vec::new();
        for block in &layout.blocks {
            let at = block.rfind(&self.answer_prefix)?;
            let (question, answer) = block.split_at(at + self.answer_prefix.len());
            if !user.is_empty() {
                user.push_str("\n\n");
            }
            user.push_str(question);
            messages.push(Message::new("user", self.fill(&user, slots)));
            messages.push(Message::new("assistant", self.fill(answer.trim(), slots)));
            user.clear();
        }
        if !user.is_empty() {
            user.push_str("\n\n");
        }
        user.push_str(&layout.instance);
        messages.push(Message::new("user", self.fill(&user, slots)));
        Some(messages)
    }
}

/// A template cut at its demonstrations: the instruction before them, each demonstration,
/// and the instance (from the paragraph with `{text}` to the end).
#[derive(Debug, Clone, PartialEq)]
pub struct Demonstrations {
    /// The instruction before the first demonstration.
    pub head: String,
    /// The demonstrations, in order.
    pub blocks: Vec<String>,
    /// The item's part: from the paragraph with `{text}` to the end.
    pub instance: String,
}

impl Demonstrations {
    /// Finds the demonstrations of a sentiment template: the paragraphs before the instance
    /// that start as the instance's paragraph does before `{text}` (`Example: `, `Review: `),
    /// each running to the next.
    pub fn of(template: &PromptTemplate) -> Result<Self> {
        let paragraphs: Vec<&str> = template.text.split("\n\n").collect();
        let Some(at) = paragraphs.iter().position(|p| p.contains("{text}")) else {
            bail!("template {} has no {{text}} paragraph", template.id);
        };
        let marker = &paragraphs[at][..paragraphs[at].find("{text}").expect("found above")];
        ensure!(
            !marker.trim().is_empty(),
            "template {}: nothing introduces {{text}} in its paragraph, so its demonstrations \
             cannot be told apart",
            template.id
        );
        let starts: Vec<usize> = (0..at)
            .filter(|&i| paragraphs[i].starts_with(marker))
            .collect();
        let first = starts.first().copied().unwrap_or(at);
        let blocks = starts
            .iter()
            .zip(starts.iter().skip(1).chain([&at]))
            .map(|(&from, &to)| paragraphs[from..to].join("\n\n"))
            .collect();
        Ok(Self {
            head: paragraphs[..first].join("\n\n"),
            blocks,
            instance: paragraphs[at..].join("\n\n"),
        })
    }

    /// The template text with `blocks` as its demonstrations.
    pub fn text_with(&self, blocks: &[String]) -> String {
        let parts = [self.head.as_str()]
            .into_iter()
            .chain(blocks.iter().map(String::as_str))
            .chain([self.instance.as_str()])
            .filter(|p| !p.is_empty());
        parts.collect::<Vec<_>>().join("\n\n")
    }
}

/// Fails on a `{name}` that is not one of [`PLACEHOLDERS`].
fn check_placeholders(text: &str) -> Result<()> {
    for (start, _) in text.match_indices('{') {
        let name: String = text[start + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let closed = text[start + 1 + name.len()..].starts_with('}');
        if closed && !PLACEHOLDERS.contains(&name.as_str()) {
            bail!(
                "unknown placeholder {{{name}}}; templates may use {}",
                PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(" ")
            );
        }
    }
    Ok(())
}

/// `['a', 'b']`, as the papers' prompts print keyword lists.
fn python_list(words: &[String]) -> String {
    let quoted: Vec<String> = words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "\\'")))
        .collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_templates_parse_and_fill_every_slot() {
        for (name, source) in BUILTIN_TEMPLATES {
            let template = PromptTemplate::parse(source).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(format!("{}.toml", template.id), name);
            let keywords = vec!["dull".to_string(), "it's".to_string()];
            let rendered = template.render(&Slots {
                text: "A fine film.",
                premise: "P.",
                label: "positive",
                target: "negative",
                keywords: Some(&keywords),
            });
            for p in PLACEHOLDERS {
                assert!(
                    !rendered.contains(&format!("{{{p}}}")),
                    "{name}: {{{p}}} left"
                );
            }
            assert!(rendered.ends_with(&template.answer_prefix), "{name}");
            let demos = template.demonstration_answers();
            assert!(
                demos.len() >= 2 && demos.iter().all(|d| !d.is_empty()),
                "{name}"
            );
            if template.uses_keywords() {
                assert!(rendered.contains("['dull', 'it\\'s']"), "{name}");
            }
        }
    }

    #[test]
    fn a_template_rewritten_with_another_text_parses_back() {
        let lass = PromptTemplate::load("lass-sentiment").unwrap();
        let text = format!(
            "{}\n\nExample: \"Quoted\" — ok.\n\nCounterfactual: {{text}}",
            lass.text
        );
        let source = lass.with_text("mine", "my version", &text).unwrap();
        let mine = PromptTemplate::parse(&source).unwrap();
        assert_eq!(
            (mine.id.as_str(), mine.text.as_str()),
            ("mine", text.as_str())
        );
        assert_eq!(
            (mine.system, mine.answer_prefix, mine.stop, mine.labels),
            (lass.system, lass.answer_prefix, lass.stop, lass.labels)
        );
    }

    #[test]
    fn demonstrations_as_turns_are_questions_and_answers_then_the_instance() {
        let template = PromptTemplate::load("core-sentiment").unwrap();
        assert_eq!(template.demonstrations, DemonstrationLayout::Turns);
        let keywords = vec!["dull".to_string()];
        let slots = Slots {
            text: "A fine film.",
            label: "positive",
            target: "negative",
            keywords: Some(&keywords),
            ..Slots::default()
        };
        let Prompt::Chat(messages) = template.chat(&slots) else {
            panic!("not a chat")
        };
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "user", "assistant", "user"]
        );
        let answers = template.demonstration_answers();
        assert_eq!([&*messages[2].content, &*messages[4].content], answers[..]);
        assert!(messages[1].content.starts_with("Given a movie review"));
        assert!(messages[1].content.contains("\n\nReview: Long, boring"));
        assert!(messages[3].content.starts_with("Review: I don't know why"));
        for question in [1, 3, 5] {
            assert!(messages[question].content.ends_with("Edited Review:"));
        }
        let instance = &messages[5].content;
        assert!(
            instance.starts_with("Review: A fine film.\nLabel: Positive"),
            "{instance}"
        );
        assert!(
            instance.contains("['dull']\nTarget Label: Negative"),
            "{instance}"
        );
        // The inline layout sends the same words as one message.
        let inline = PromptTemplate {
            demonstrations: DemonstrationLayout::Inline,
            ..template.clone()
        };
        assert_eq!(
            inline.chat(&slots),
            Prompt::Chat(vec![
                messages[0].clone(),
                Message::new("user", template.render(&slots)),
            ])
        );
        // A rewrite keeps the layout.
        let source = template.with_text("mine", "mine", &template.text).unwrap();
        assert_eq!(
            PromptTemplate::parse(&source).unwrap().demonstrations,
            DemonstrationLayout::Turns
        );
    }

    #[test]
    fn sentiment_labels_are_mapped_and_values_are_not_refilled() {
        let template = PromptTemplate::load("core-sentiment").unwrap();
        let rendered = template.render(&Slots {
            text: "I said {target}.",
            label: "positive",
            target: "negative",
            ..Default::default()
        });
        assert!(rendered.contains("Review: I said {target}.\nLabel: Positive\n"));
        assert!(rendered.contains("Target Label: Negative\nEdited Review:"));
        assert_eq!(
            template.demonstration_answers(),
            vec![
                "Perfect, clean, interesting. Never have I been so sad to see ending credits roll.",
                "I don't know why I hate this movie so much, now I am tired of watching it."
            ]
        );
    }

    #[test]
    fn bad_templates_are_refused_with_reasons() {
        let base = "id = \"x\"\ndescription = \"d\"\ntask = \"sentiment\"\nsystem = \"s\"\n\
                    answer_prefix = \"A:\"\n[template]\ntext = ";
        let unknown = PromptTemplate::parse(&format!("{base}\"{{text}} {{colour}}\"")).unwrap_err();
        assert!(unknown.to_string().contains("{colour}"), "{unknown}");
        let missing = PromptTemplate::parse(&format!("{base}\"no slot\"")).unwrap_err();
        assert!(missing.to_string().contains("{text}"), "{missing}");
        assert!(PromptTemplate::load("no-such-template").is_err());
        // Turns need demonstrations that start as the instance does, each with the answer prefix.
        let turns = base.replace("[template]", "demonstrations = \"turns\"\n[template]");
        let text = |body: &str| format!("{turns}\"\"\"\nDo it.\n\n{body}\n\nQ: {{text}}\nA:\"\"\"");
        assert!(PromptTemplate::parse(&text("Q: good\nA: bad")).is_ok());
        let none = PromptTemplate::parse(&text("Example: good\nA: bad")).unwrap_err();
        assert!(none.to_string().contains("no demonstration"), "{none}");
        let unanswered = PromptTemplate::parse(&text("Q: good\nbad")).unwrap_err();
        assert!(
            unanswered.to_string().contains("answer prefix"),
            "{unanswered}"
        );
    }
}
