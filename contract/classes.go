package contract

// Error classes: an error record's error_class, and the worker's metric
// label. They are part of the contract: redrive and alerting select on them.
const (
	ClassBadMessage     = "bad_message"    // body is not a job or S3 event
	ClassMissing        = "missing_object" // input object does not exist
	ClassAccessDenied   = "access_denied"  // the input refuses the worker's read while its bucket serves others
	ClassArchived       = "archived"       // the input is in an archive storage class: restore it first
	ClassTooLarge       = "too_large"      // input object exceeds the size limit
	ClassCorruptAudio   = "corrupt_audio"  // bytes are not a valid recording
	ClassUnsupported    = "unsupported_audio"
	ClassRejected       = "rejected_by_model" // inference server refused the input
	ClassModelFailed    = "model_failed"      // the model failed on the input the same way on two partitions that serve others
	ClassExhausted      = "retries_exhausted" // retryable failures hit the receive limit
	ClassEmptyAudio     = "empty_audio"       // a valid recording with no samples at all
	ClassOutputRejected = "output_rejected"   // S3 refused the output object itself
	ClassBadVocabulary  = "bad_vocabulary"    // the job's vocabulary is missing, invalid, or the model takes none
	// ClassDiarizationUnavailable is a transcript's speaker_error class (never
	// an error record's): the worker serves no diarization model.
	ClassDiarizationUnavailable = "diarization_unavailable"
)
