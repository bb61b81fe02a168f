# The input and output buckets (one bucket may be both): encrypted with a
# key of their own or the one given, public access blocked, TLS only,
# versioned, with lifecycle rules.

locals {
  # One bucket may serve as both input and output.
  buckets = toset(distinct([var.input_bucket_name, var.output_bucket_name]))
  kms_arn = var.create_kms_key ? aws_kms_key.this[0].arn : var.kms_key_arn
}

resource "aws_kms_key" "this" {
  count = var.create_kms_key ? 1 : 0

  description             = "fleetscribe audio and transcripts (${var.output_bucket_name})"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  count = var.create_kms_key ? 1 : 0

  name          = "alias/${replace(var.output_bucket_name, ".", "-")}" # dots are valid in bucket names, not in aliases
  target_key_id = aws_kms_key.this[0].key_id
}

resource "aws_s3_bucket" "this" {
  for_each = local.buckets

  bucket        = each.key
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  for_each = aws_s3_bucket.this

  bucket = each.value.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  for_each = aws_s3_bucket.this

  bucket                  = each.value.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  for_each = aws_s3_bucket.this

  bucket = each.value.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = local.kms_arn
    }
    bucket_key_enabled = true
  }

  lifecycle {
    precondition {
      condition     = var.create_kms_key != (var.kms_key_arn != null)
      error_message = "Give kms_key_arn with create_kms_key = false, or neither."
    }
  }
}

# Versioning: a re-upload of the same key gets a new version id, and so a
# new transcript key; nothing is overwritten in place.
resource "aws_s3_bucket_versioning" "this" {
  for_each = aws_s3_bucket.this

  bucket = each.value.id
  versioning_configuration {
    status = "Enabled"
  }
}

data "aws_iam_policy_document" "tls_only" {
  for_each = aws_s3_bucket.this

  # A deny on every action is the documented way to refuse plain HTTP; it is
  # the only wildcard action in this project and it grants nothing.
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [each.value.arn, "${each.value.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "tls_only" {
  for_each = aws_s3_bucket.this

  bucket = each.value.id
  policy = data.aws_iam_policy_document.tls_only[each.key].json

  depends_on = [aws_s3_bucket_public_access_block.this]
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  for_each = aws_s3_bucket.this

  bucket = each.value.id

  rule {
    id     = "expire-error-records"
    status = each.key == var.output_bucket_name ? "Enabled" : "Disabled"
    filter {
      and {
        prefix = var.output_prefix
        tags   = { "fleetscribe-record" = "error" }
      }
    }
    expiration {
      days = var.error_record_expiration_days
    }
  }

  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  # A job that succeeds deletes its error record's key whether or not a
  # record is there (a DELETE is free; checking first is a paid HEAD per
  # job), which leaves a delete marker in a versioned bucket. Markers with
  # nothing behind them are removed here.
  rule {
    id     = "remove-expired-delete-markers"
    status = "Enabled"
    filter {}
    expiration {
      expired_object_delete_marker = true
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}
