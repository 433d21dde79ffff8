//! A model's chat template (`chat_template` in `tokenizer_config.json`, or a GGUF file's
//! `tokenizer.chat_template`): the Jinja program that wraps messages in the markers the model
//! was trained on, run by `minijinja` as HF's `apply_chat_template` runs it (`trim_blocks`,
//! `lstrip_blocks`, Python's string methods, `raise_exception`). A template comes from a file
//! anyone may hand us, so its work is bounded (fuel) and its errors are errors, not panics.

use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, ErrorKind};

use crate::error::{Error, Result};

/// Instructions a template may run for one rendering: real templates need a few thousand.
const FUEL: u64 = 2_000_000;

/// Longest text a rendering may produce, in bytes.
const MAX_RENDERED_BYTES: usize = 1 << 20;

/// A chat template and the special tokens it is given.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
    /// Where the template came from, for errors.
    file: String,
}

impl ChatTemplate {
    /// A template `source` from `file`, checked to compile.
    pub fn new(source: &str, bos_token: &str, eos_token: &str, file: &str) -> Result<Self> {
        let t = Self {
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            file: file.to_owned(),
        };
        t.environment()?
            .template_from_str(&t.source)
            .map_err(|e| t.error(e))?;
        Ok(t)
    }

    /// One user message wrapped by the template, with the assistant's turn opened
    /// (`add_generation_prompt=True`): the text a chat model continues.
    pub fn user(&self, text: &str) -> Result<String> {
        let env = self.environment()?;
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| self.error(e))?;
        let messages = vec![context! { role => "user", content => text }];
        let out = template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| self.error(e))?;
        if out.len() > MAX_RENDERED_BYTES {
            return Err(Error::Input(format!(
                "{}: the chat template made {} bytes of text, over the limit of {MAX_RENDERED_BYTES}",
                self.file,
                out.len()
            )));
        }
        Ok(out)
    }

    /// The environment HF renders templates in: blocks trimmed, Python's string methods,
    /// `raise_exception`, and a bounded amount of work.
    fn environment(&self) -> Result<Environment<'static>> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| self.error(e))?;
        env.set_syntax(syntax);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        Ok(env)
    }

    fn error(&self, e: minijinja::Error) -> Error {
        let why = match e.kind() {
            ErrorKind::OutOfFuel => "it runs too long (a loop without end?)".to_owned(),
            _ => e.to_string(),
        };
        Error::Input(format!("{}: the chat template: {why}", self.file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn chatml_wraps_a_user_message_as_hf_does() {
        let t = ChatTemplate::new(CHATML, "<|im_start|>", "<|im_end|>", "t").unwrap();
        assert_eq!(
            t.user("hi").unwrap(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
             Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_methods_blocks_trimmed_and_raise_exception() {
        let src = "{% for m in messages %}\n  {{ m.content.strip() }}\n{% endfor %}";
        let t = ChatTemplate::new(src, "", "", "t").unwrap();
        // as Jinja2 renders it: the newline after a block tag dropped, the content stripped
        assert_eq!(t.user("  x  ").unwrap(), "  x\n");
        let t = ChatTemplate::new("{{ raise_exception('no system') }}", "", "", "t").unwrap();
        let e = t.user("x").unwrap_err().to_string();
        assert!(e.contains("no system"), "{e}");
    }

    #[test]
    fn a_template_that_never_ends_or_does_not_parse_is_an_error() {
        let src =
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let e = ChatTemplate::new(src, "", "", "f.gguf")
            .unwrap()
            .user("x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.gguf") && e.contains("too long"), "{e}");
        let e = ChatTemplate::new("{% for %}", "", "", "f.gguf").unwrap_err();
        assert!(e.to_string().contains("f.gguf"), "{e}");
    }
}
