//! `clarify`: a question put to the session's client, answered through
//! `AnswerClarify`, or hermes' error when nobody can answer.

use super::*;

impl AgentLoop {
    pub(super) async fn clarify(&mut self, call_id: &str, args: &Map<String, Value>) -> ToolReply {
        let question = match clarify::parse(args) {
            Ok(question) => question,
            Err(result) => return result,
        };
        if !self.spec.interactive || !self.events.is_attached() {
            return clarify::unavailable();
        }
        self.questions += 1;
        let question_id = format!("q{}", self.questions);
        let (answer_tx, answer_rx) = oneshot::channel();
        if self
            .myself
            .cast(SessionMsg::AwaitClarify {
                question_id: question_id.clone(),
                answer: answer_tx,
            })
            .is_err()
        {
            return clarify::unavailable();
        }
        self.emit(
            events::CLARIFY,
            &json!({"question_id": question_id, "call_id": call_id, "question": question.question, "choices": question.choices}),
        );
        let timeout = self.hub.settings.clarify_timeout;
        tokio::select! {
            biased;
            _ = self.spec.cancel.cancelled() => cancelled("clarify"),
            _ = tokio::time::sleep(timeout) => clarify::timed_out(timeout.as_secs()),
            answer = answer_rx => match answer {
                Ok(answer) => clarify::answered(&question, &answer),
                Err(_) => clarify::unavailable(),
            },
        }
    }
}
