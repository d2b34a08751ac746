# The trace context of the enqueue (OpenTelemetry), kept for the run's span: a nullable column, no rewrite.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobq', '0006_tags'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='trace_context',
            field=models.JSONField(blank=True, help_text="The trace context of the enqueue (OpenTelemetry), for the run's span.", null=True),
        ),
    ]
