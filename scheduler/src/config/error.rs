//! [`ConfigError`]: why a configuration was refused, naming the file and the
//! field path (`profiles[0].plugins.score.enabled[1].name`).

use std::fmt;

/// Why a `KubeSchedulerConfiguration` was refused. Always one error: the
/// first problem found, in upstream's validation order. None is retryable:
/// the file must be fixed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read the scheduler configuration: {source}")]
    Read {
        /// The file.
        file: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// YAML or JSON syntax error.
    #[error("{file}: {}", Syntax { line: *line, column: *column, message })]
    Syntax {
        /// The file (or the source name given to [`super::parse`]).
        file: String,
        /// 1-based line, when known (0 otherwise).
        line: u64,
        /// 1-based column, when known (0 otherwise).
        column: u64,
        /// The parser's message.
        message: String,
    },
    /// A field has a bad value, an unknown name, or the configuration asks
    /// for something Flotilla does not do.
    #[error("{file}: {}", Field { path, message })]
    Invalid {
        /// The file (or source name).
        file: String,
        /// Field path in the configuration, e.g.
        /// `profiles[0].pluginConfig[1].args.scoringStrategy.type`; empty
        /// for the document as a whole.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Renders `line L column C: message`.
struct Syntax<'a> {
    line: u64,
    column: u64,
    message: &'a str,
}

impl fmt::Display for Syntax<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {} column {}: ", self.line, self.column)?;
        }
        f.write_str(self.message)
    }
}

/// Renders `path: message` (or `message` when the path is empty).
struct Field<'a> {
    path: &'a str,
    message: &'a str,
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(self.message)
    }
}

impl ConfigError {
    /// The file or source name the error is about.
    #[must_use]
    pub fn file(&self) -> &str {
        match self {
            ConfigError::Read { file, .. }
            | ConfigError::Syntax { file, .. }
            | ConfigError::Invalid { file, .. } => file,
        }
    }

    /// The field path (empty for read and syntax errors, and for errors
    /// about the document as a whole).
    #[must_use]
    pub fn path(&self) -> &str {
        match self {
            ConfigError::Invalid { path, .. } => path,
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => "",
        }
    }

    /// What is wrong, without the file and path.
    #[must_use]
    pub fn message(&self) -> String {
        match self {
            ConfigError::Read { source, .. } => source.to_string(),
            ConfigError::Syntax {
                line,
                column,
                message,
                ..
            } => Syntax {
                line: *line,
                column: *column,
                message,
            }
            .to_string(),
            ConfigError::Invalid { message, .. } => message.clone(),
        }
    }
}

/// A validation error before the file name is known: path + message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// Field path.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// An error at `path`.
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Attaches the file name.
    pub(crate) fn in_file(self, file: &str) -> ConfigError {
        ConfigError::Invalid {
            file: file.to_owned(),
            path: self.path,
            message: self.message,
        }
    }
}
